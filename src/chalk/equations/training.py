"""Training compute: 6ND, the RL and inference pools of eq. 7, Chinchilla, pipeline bubbles, GPU-hours."""

from __future__ import annotations

import numpy as np

# defined once, in equations.parallel; re-exported for the training analysis
from chalk.equations.parallel import pipeline_bubble_fraction, ring_allreduce_time_s  # noqa: E402,F401

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


def pretraining_flops(active_params, tokens, flops_per_param_token=6.0):
    """Pretraining compute, the lecture's 6ND.

    Formula: C_pretrain = 6 * N_active * D_pretrain   (2 forward + 4 backward FLOPs per param per token)
    Ref: lecture eq. 7; Kaplan et al. 2020 (C ~ 6ND); Hoffmann et al. 2022 (Chinchilla).
    Assumes: attention FLOPs ignored (see `training_flops_per_token` for the count with attention).
    """
    return flops_per_param_token * np.asarray(active_params, dtype=float) * np.asarray(tokens, dtype=float)


def training_flops_per_token(forward_flops_per_token):
    """FLOPs to train on one token given its forward FLOPs: forward once, backward twice as much.

    Formula: F_train = 3 * F_forward   (F_forward = 2 N_active + attention -> 6 N_active + 3 * attention)
    Ref: Narayanan et al. 2021 (Megatron-LM, model FLOPs); Chowdhery et al. 2022 (PaLM, MFU counts attention).
    Assumes: no activation recomputation counted (model FLOPs, not hardware FLOPs).
    """
    return 3.0 * np.asarray(forward_flops_per_token, dtype=float)


def rl_flops(active_params, tokens, flops_per_param_token=3.0, inefficiency=3.0):
    """Reinforcement-learning compute pool.

    Formula: C_RL = k_RL * N_active * D_RL * inefficiency,  k_RL in [2, 6]
             (2: rollouts only, forward; 6: train on every rollout token; the lecture takes 3)
    Ref: lecture eq. 7 ("2..6 N D for RL"; "RL at 3 FLOPs/param/token, inefficiency 3").
    Assumes: `inefficiency` = pretraining MFU / RL MFU (rollouts are decode, far below pretraining MFU).
    """
    return (flops_per_param_token * np.asarray(active_params, dtype=float) * np.asarray(tokens, dtype=float)
            * inefficiency)


def inference_flops(active_params, tokens, inefficiency=3.0, flops_per_param_token=2.0):
    """Inference compute pool over a model's deployment.

    Formula: C_inference = 2 * N_active * D_inference * inefficiency
    Ref: lecture eq. 7 ("2 N D for inference"; inefficiency 3).
    Assumes: `inefficiency` = pretraining MFU / serving MFU; prompt tokens not counted separately.
    """
    return (flops_per_param_token * np.asarray(active_params, dtype=float) * np.asarray(tokens, dtype=float)
            * inefficiency)


def chinchilla_tokens(active_params, tokens_per_param=20.0):
    """Compute-optimal pretraining tokens for a model size.

    Formula: D_chinchilla = 20 * N_active
    Ref: Hoffmann et al. 2022 (Chinchilla, ~20 tokens per parameter); lecture ("20 x 100B = 2T").
    Assumes: the dense-model rule carries over to MoE with N = active parameters (the lecture's use).
    """
    return tokens_per_param * np.asarray(active_params, dtype=float)


def overtraining_factor(tokens, chinchilla):
    """How many times past compute-optimal a model is trained.

    Formula: D_pretrain / D_chinchilla
    Ref: lecture ("models may be 100x over-trained beyond Chinchilla-optimal").
    Assumes: nothing.
    """
    return np.asarray(tokens, dtype=float) / np.asarray(chinchilla, dtype=float)


def inference_tokens(tokens_per_s, window_s, obsolescence_probability=0.0):
    """Tokens a model serves over its deployment window, discounted for losing best-in-class.

    Formula: D_inference = R * T * (1 - p)
    Ref: lecture ("50M tokens/s x 60 days ~ 200T"; flashcard: "if your model has only 50% chance of
         being best-in-class, you should train less: D_inference gets discounted").
    Assumes: traffic R is flat over the window; with probability p the model is displaced and serves
        nothing (an all-or-nothing discount: the expected useful window is T * (1 - p)).
    """
    p = np.asarray(obsolescence_probability, dtype=float)
    return np.asarray(tokens_per_s, dtype=float) * np.asarray(window_s, dtype=float) * (1.0 - p)


def equilibrium_pretrain_tokens(inference_tokens_, inference_inefficiency=3.0, inference_flops_per_param=2.0,
                                pretrain_flops_per_param=6.0):
    """Pretraining tokens whose compute equals the inference pool's (eq. 7 solved for D_pretrain).

    Formula: 6 N D_pretrain = 2 N D_inference * inefficiency  ->  D_pretrain = D_inference * 2 * ineff / 6
    Ref: lecture eq. 7 ("at the cost optimum the three pools are about equal"; with inefficiency 3,
         D_pretrain = D_inference).
    Assumes: the marginal trade between pretraining and serving quality makes the optimum the point of
        equal spend (the lecture's heuristic), and N_active is the same model in both pools.
    """
    return (np.asarray(inference_tokens_, dtype=float) * inference_flops_per_param * inference_inefficiency
            / pretrain_flops_per_param)


def equilibrium_rl_tokens(pretrain_tokens, rl_flops_per_param=3.0, rl_inefficiency=3.0,
                          pretrain_flops_per_param=6.0):
    """RL tokens whose compute equals the pretraining pool's (eq. 7 solved for D_RL).

    Formula: 6 N D_pretrain = k_RL N D_RL * inefficiency  ->  D_RL = 6 D_pretrain / (k_RL * ineff)
    Ref: lecture eq. 7 (k_RL = 3, inefficiency 3 -> D_pretrain = 1.5 D_RL).
    Assumes: as `equilibrium_pretrain_tokens`.
    """
    return (pretrain_flops_per_param * np.asarray(pretrain_tokens, dtype=float)
            / (rl_flops_per_param * rl_inefficiency))


def amdahl_speedup(accelerated_share, factor):
    """Speed-up of a whole when only a share of its time runs `factor` times faster.

    Formula: S = 1 / ((1 - g) + g / s)
    Ref: Amdahl 1967. Used for FP8 training: only the GEMMs run at the FP8 rate.
    Assumes: the accelerated and unaccelerated parts do not overlap.
    """
    g = np.asarray(accelerated_share, dtype=float)
    return 1.0 / ((1.0 - g) + g / np.asarray(factor, dtype=float))


def gpu_hours(flops, achieved_flops_per_s_per_gpu):
    """GPU-hours to do `flops` of work at an achieved per-GPU rate.

    Formula: GPU-h = C / (peak * MFU) / 3600
    Ref: Llama 3 paper (GPU-hours), DeepSeek-V3 report (H800 GPU-hours).
    Assumes: all GPUs busy at the same achieved rate for the whole run (no failures or restarts).
    """
    return np.asarray(flops, dtype=float) / np.asarray(achieved_flops_per_s_per_gpu, dtype=float) / SECONDS_PER_HOUR
