/* core/quant_iq.c: placeholder until written */
