/* core/gguf_write.c: placeholder until written */
