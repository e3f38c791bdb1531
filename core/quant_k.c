/* core/quant_k.c: placeholder until written */
