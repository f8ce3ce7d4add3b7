"""The lecture itself: its claims, training, reversible networks, hardware facts."""
