# measured — the default profile: classic's switch (its cases, thresholds and formulas) with the
# temperatures, the draws and the min-p gate that measured answer accuracy chose (docs/entropix.md,
# "The default profile"; docs/eval.md). No case samples hotter than the model's own distribution,
# every sampling case keeps the most likely of 5 draws (a leading token is kept, near-equal ones
# still spread), and no token below a tenth of the top one's probability is drawn. Entropies in
# bits, varentropies in bits². Formulas: sampler/entropix.h. Built in as `--profile measured`.

# Metrics
attn_layer = last              # last | all | a layer index
attn_varentropy_def = heads    # heads: variance across heads of per-head entropy (the sources')

# Base sampling parameters (T0, top_k0, top_p0, min_p0)
temperature = 0.666
top_k = 27
top_p = 0.9
min_p = 0.1                    # classic 0.03
temp_max = 1                   # no case samples hotter than this (classic 0: no cap)

# LELV "flowing": H < a && V < b -> argmax
lelv_entropy_below = 0.1
lelv_varentropy_below = 0.1

# HELV "treading carefully": H > a && V < b -> pause token once per run, else sample with
# T = min(max, T0·(base + c·attn_ent))
helv_entropy_above = 5
helv_varentropy_below = 0.1
helv_insert_pause = 1
pause_token_id = -1            # -1: " ..." (or "...") found by text in the vocabulary
helv_temp_base = 1.3
helv_temp_attn_entropy = 0.2
helv_temp_max = 1.5
helv_n_samples = 5             # draws when it samples; the best by score (classic 1)

# LEHV "exploring forks": H < a && V > b -> T = min(max, T0·(base + c·IS)),
# top_k = max(min, int(top_k0·(1 + d·(1 - agreement))))
lehv_entropy_below = 5
lehv_varentropy_above = 5
lehv_temp_base = 1.2
lehv_temp_interaction = 0.3
lehv_temp_max = 1.5
lehv_top_k_disagreement = 0.5
lehv_top_k_min = 5
lehv_n_samples = 5             # classic 1

# HEHV "resampling in the mist": H > a && V > b -> T = max(min, T0·(base + c·attn_vent)),
# top_p = max(min, top_p0 - d·attn_ent)
hehv_entropy_above = 3
hehv_varentropy_above = 5
hehv_temp_base = 2
hehv_temp_attn_varentropy = 0.5
hehv_temp_min = 2
hehv_top_p_attn_entropy = 0.2
hehv_top_p_min = 0.5
hehv_n_samples = 5             # classic 1

# ADAPTIVE (otherwise): lu = H + V, au = attn_ent + attn_vent
# T = T0·(1 + a·lu + b·au - c·agreement)
ada_temp_logits_unc = 0.3
ada_temp_attn_unc = 0.2
ada_temp_agreement = 0.2
# top_p = clip(top_p0·(1 + d·attn_vent), min, max)
ada_top_p_attn_varentropy = 0.1
ada_top_p_min = 0.1
ada_top_p_max = 1
# top_k = clip(round(top_k0·(1 + e·IS - f·agreement)), min, max)
ada_top_k_interaction = 0.3
ada_top_k_agreement = 0.2
ada_top_k_min = 1
ada_top_k_max = 100
# min_p = clip(min_p0·(1 - g·lu), min, max)
ada_min_p_logits_unc = 0       # classic 0.5
ada_min_p_min = 0              # classic 0.01
ada_min_p_max = 1              # classic 0.5
# best of n draws by score -s - w·|s - H| (s = -log2 p of the draw); w = 0: the most likely
ada_n_samples = 5
ada_score_typicality = 0       # classic 2: the most likely of the draws
