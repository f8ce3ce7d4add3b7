"""Energy: what a token costs in joules and in electricity, from the chips' power draw over a step."""

from __future__ import annotations

import numpy as np

#: Joules in one kilowatt-hour (3.6e6 J = 1,000 W x 3,600 s).
J_PER_KWH = 3.6e6


def energy_per_token_j(power_w_per_chip, step_s, chips, tokens_per_step, pue=1.0):
    """Energy drawn per token produced by a step.

    Formula: E_token = P_chip * N_chips * T_step * PUE / tokens_per_step   (J; W * s = J)
    Ref: definition (energy = power x time), shared over the step's tokens as eq. 4 shares rental cost.
    Assumes: every chip draws `power_w_per_chip` for the whole step; with the TDP this is an upper bound on the
        accelerator's draw (decode rarely holds a chip at TDP). Host CPUs, NICs and switches are outside it
        unless the PUE factor (facility power / IT power, >= 1) is meant to cover them.
    """
    return (np.asarray(power_w_per_chip, dtype=float) * chips * np.asarray(step_s, dtype=float) * pue
            / np.asarray(tokens_per_step, dtype=float))


def energy_cost_per_mtok_usd(energy_per_token_j, usd_per_kwh):
    """Electricity cost of a million tokens.

    Formula: C = E_token * 1e6 / J_PER_KWH * price   (USD per million tokens; J_PER_KWH = 3.6e6)
    Ref: definition of the kilowatt-hour.
    Assumes: one flat electricity price; no demand charges or time-of-day pricing.
    """
    return np.asarray(energy_per_token_j, dtype=float) * 1e6 / J_PER_KWH * usd_per_kwh
