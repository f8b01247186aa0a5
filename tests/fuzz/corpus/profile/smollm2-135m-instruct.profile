# calibrated by tools/calibrate from weights/smollm2-135m-instruct.q8.bin on tests/data/perplexity/text.txt
# (build/tools/calibrate weights/smollm2-135m-instruct.q8.bin tests/data/perplexity/text.txt -o this file)
# 1984 positions (windows of 512 tokens, first 16 skipped), base profile classic
# logits entropy H (bits): P10 1.986 P25 3.157 P30 3.435 P50 4.617 P70 5.86 P75 6.192 P85 7.034 P90 7.576
# logits varentropy V (bits²): P10 6.464 P25 8.94 P30 9.578 P50 11.72 P70 13.68 P75 14.29 P85 15.99 P90 17.24
# attention entropy (bits): P10 2.626 P25 3.224 P30 3.344 P50 3.738 P70 4.11 P75 4.206 P85 4.42 P90 4.564
# attention varentropy (bits²): P10 0.6043 P25 0.933 P30 1.041 P50 1.427 P70 1.821 P75 1.931 P85 2.239 P90 2.436
# interaction strength: P10 2.305 P25 2.541 P30 2.603 P50 2.87 P70 3.137 P75 3.211 P85 3.377 P90 3.497
# agreement: P10 0.001913 P25 0.002308 P30 0.002427 P50 0.003298 P70 0.005042 P75 0.00594 P85 0.009232 P90 0.01207
# thresholds: LELV H<P30 V<P30, HELV H>P85 V<P30, LEHV H<P50 V>P70, HEHV H>P70 V>P70 (sampler/calibrate.h)
# case shares on these positions:
#   classic      LELV   0.0% HELV   0.0% LEHV  50.5% HEHV  43.6% ADAPTIVE   5.8%
#   calibrated   LELV  20.0% HELV   0.9% LEHV   9.1% HEHV  13.0% ADAPTIVE  57.1%
attn_layer = last
attn_varentropy_def = heads
temperature = 0.666
top_k = 27
top_p = 0.9
min_p = 0.03
lelv_entropy_below = 3.4353638655467704
lelv_varentropy_below = 9.577651542715808
helv_entropy_above = 7.034191010122042
helv_varentropy_below = 9.577651542715808
helv_insert_pause = 1
pause_token_id = -1
helv_temp_base = 1.3
helv_temp_attn_entropy = 0.6366270188560287
helv_temp_max = 1.5
lehv_entropy_below = 4.617137441882452
lehv_varentropy_above = 13.68219428116807
lehv_temp_base = 1.2
lehv_temp_interaction = 0.020907147288440824
lehv_temp_max = 1.5
lehv_top_k_disagreement = 0.5
lehv_top_k_min = 5
hehv_entropy_above = 5.860330266645674
hehv_varentropy_above = 13.68219428116807
hehv_temp_base = 2
hehv_temp_attn_varentropy = 0
hehv_temp_min = 2
hehv_top_p_attn_entropy = 0.6366270188560287
hehv_top_p_min = 0.5
ada_temp_logits_unc = 0.3
ada_temp_attn_unc = 0.46079661980063974
ada_temp_agreement = 0.2
ada_top_p_attn_varentropy = 0
ada_top_p_min = 0.1
ada_top_p_max = 1
ada_top_k_interaction = 0.020907147288440824
ada_top_k_agreement = 0.2
ada_top_k_min = 1
ada_top_k_max = 100
ada_min_p_logits_unc = 0.5
ada_min_p_min = 0.01
ada_min_p_max = 0.5
ada_n_samples = 5
ada_score_typicality = 2
