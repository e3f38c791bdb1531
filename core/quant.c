/* core/quant.c: placeholder until written */
