# calibrated by tools/calibrate from weights/smollm2-135m-instruct.q8.bin on tests/data/perplexity/text.txt
# (build/tools/calibrate weights/smollm2-135m-instruct.q8.bin tests/data/perplexity/text.txt -o this file)
# 1984 positions (windows of 512 tokens, first 16 skipped), base profile measured
# logits entropy H (bits): P10 1.977 P25 3.148 P30 3.46 P50 4.601 P70 5.868 P75 6.205 P85 7.039 P90 7.566
# logits varentropy V (bits²): P10 6.502 P25 8.884 P30 9.57 P50 11.69 P70 13.71 P75 14.33 P85 16.01 P90 17.26
# attention entropy (bits): P10 2.631 P25 3.228 P30 3.345 P50 3.74 P70 4.108 P75 4.208 P85 4.415 P90 4.572
# attention varentropy (bits²): P10 0.5992 P25 0.9333 P30 1.043 P50 1.421 P70 1.815 P75 1.929 P85 2.233 P90 2.424
# interaction strength: P10 2.302 P25 2.539 P30 2.601 P50 2.868 P70 3.14 P75 3.21 P85 3.381 P90 3.497
# agreement: P10 0.001913 P25 0.0023 P30 0.002425 P50 0.003292 P70 0.005057 P75 0.005948 P85 0.009233 P90 0.01209
# thresholds: LELV H<P30 V<P30, HELV H>P85 V<P30, LEHV H<P50 V>P70, HEHV H>P70 V>P70 (sampler/calibrate.h)
# case shares on these positions:
#   measured     LELV   0.0% HELV   0.0% LEHV  50.5% HEHV  43.5% ADAPTIVE   5.9%
#   calibrated   LELV  20.1% HELV   0.8% LEHV   9.4% HEHV  13.1% ADAPTIVE  56.7%
# temperature of each case at the median metrics: LELV 0 HELV 1 LEHV 0.839 HEHV 1 ADAPTIVE 1
attn_layer = last
attn_varentropy_def = heads
temperature = 0.666
top_k = 27
top_p = 0.9
min_p = 0.1
temp_max = 1
lelv_entropy_below = 3.4599138781878636
lelv_varentropy_below = 9.570209207272
helv_entropy_above = 7.0390929768270265
helv_varentropy_below = 9.570209207272
helv_insert_pause = 1
pause_token_id = -1
helv_temp_base = 1.3
helv_temp_attn_entropy = 0.6363291850401255
helv_temp_max = 1.5
helv_n_samples = 5
lehv_entropy_below = 4.600916336524859
lehv_varentropy_above = 13.708203437319776
lehv_temp_base = 1.2
lehv_temp_interaction = 0.02092392821603983
lehv_temp_max = 1.5
lehv_top_k_disagreement = 0.5
lehv_top_k_min = 5
lehv_n_samples = 5
hehv_entropy_above = 5.867533552012149
hehv_varentropy_above = 13.708203437319776
hehv_temp_base = 2
hehv_temp_attn_varentropy = 0
hehv_temp_min = 2
hehv_top_p_attn_entropy = 0.6363291850401255
hehv_top_p_min = 0.5
hehv_n_samples = 5
ada_temp_logits_unc = 0.3
ada_temp_attn_unc = 0.4611261967371365
ada_temp_agreement = 0.2
ada_top_p_attn_varentropy = 0
ada_top_p_min = 0.1
ada_top_p_max = 1
ada_top_k_interaction = 0.02092392821603983
ada_top_k_agreement = 0.2
ada_top_k_min = 1
ada_top_k_max = 100
ada_min_p_logits_unc = 0
ada_min_p_min = 0
ada_min_p_max = 1
ada_n_samples = 5
ada_score_typicality = 0
