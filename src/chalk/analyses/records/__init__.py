"""Records every room answers in: typed results (dicts with .to_dict() / .to_frame()) and the lecture's Claim."""
