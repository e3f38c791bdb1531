/* core/types.c — the table of tensor element types (ggml ids, names, block
 * geometry).  Block sizes are the ones fixed by ggml's block structs; they
 * are stored in GGUF files, so they are facts, not choices. */
#include <ctype.h>
#include <string.h>

#include "quant.h"

#define QK_K 256

/* Which types have reference dequant / quant in core/quant*.c. */
static const si_type_traits type_table[SI_TYPE_COUNT] = {
    [SI_TYPE_F32]     = { "f32",     1,   4,                     true,  true  },
    [SI_TYPE_F16]     = { "f16",     1,   2,                     true,  true  },
    [SI_TYPE_Q4_0]    = { "q4_0",    32,  2 + 16,                true,  true  },
    [SI_TYPE_Q4_1]    = { "q4_1",    32,  2 + 2 + 16,            true,  true  },
    [SI_TYPE_Q5_0]    = { "q5_0",    32,  2 + 4 + 16,            true,  true  },
    [SI_TYPE_Q5_1]    = { "q5_1",    32,  2 + 2 + 4 + 16,        true,  true  },
    [SI_TYPE_Q8_0]    = { "q8_0",    32,  2 + 32,                true,  true  },
    [SI_TYPE_Q8_1]    = { "q8_1",    32,  2 + 2 + 32,            false, false },
    [SI_TYPE_Q2_K]    = { "q2_K",    QK_K, QK_K/16 + QK_K/4 + 4, true,  false },
    [SI_TYPE_Q3_K]    = { "q3_K",    QK_K, QK_K/8 + QK_K/4 + 12 + 2, true, false },
    [SI_TYPE_Q4_K]    = { "q4_K",    QK_K, 4 + 12 + QK_K/2,      true,  true  },
    [SI_TYPE_Q5_K]    = { "q5_K",    QK_K, 4 + 12 + QK_K/8 + QK_K/2, true, true },
    [SI_TYPE_Q6_K]    = { "q6_K",    QK_K, QK_K/2 + QK_K/4 + QK_K/16 + 2, true, true },
    [SI_TYPE_Q8_K]    = { "q8_K",    QK_K, 4 + QK_K + QK_K/16*2, false, false },
    [SI_TYPE_IQ2_XXS] = { "iq2_xxs", QK_K, 2 + QK_K/8*2,         false, false },
    [SI_TYPE_IQ2_XS]  = { "iq2_xs",  QK_K, 2 + QK_K/8*2 + QK_K/32, false, false },
    [SI_TYPE_IQ3_XXS] = { "iq3_xxs", QK_K, 2 + QK_K/4 + QK_K/8,  false, false },
    [SI_TYPE_IQ1_S]   = { "iq1_s",   QK_K, 2 + QK_K/8 + QK_K/16, false, false },
    [SI_TYPE_IQ4_NL]  = { "iq4_nl",  32,  2 + 16,                true,  false },
    [SI_TYPE_IQ3_S]   = { "iq3_s",   QK_K, 2 + QK_K/4 + QK_K/8 + QK_K/32 + 4, false, false },
    [SI_TYPE_IQ2_S]   = { "iq2_s",   QK_K, 2 + QK_K/4 + QK_K/16, false, false },
    [SI_TYPE_IQ4_XS]  = { "iq4_xs",  QK_K, 2 + 2 + QK_K/64 + QK_K/2, true, false },
    [SI_TYPE_I8]      = { "i8",      1,   1,                     false, false },
    [SI_TYPE_I16]     = { "i16",     1,   2,                     false, false },
    [SI_TYPE_I32]     = { "i32",     1,   4,                     false, false },
    [SI_TYPE_I64]     = { "i64",     1,   8,                     false, false },
    [SI_TYPE_F64]     = { "f64",     1,   8,                     false, false },
    [SI_TYPE_IQ1_M]   = { "iq1_m",   QK_K, QK_K/8 + QK_K/16 + QK_K/32, false, false },
    [SI_TYPE_BF16]    = { "bf16",    1,   2,                     true,  true  },
    [SI_TYPE_TQ1_0]   = { "tq1_0",   QK_K, 2 + 4*13,             false, false },
    [SI_TYPE_TQ2_0]   = { "tq2_0",   QK_K, 2 + 64,               false, false },
    [SI_TYPE_MXFP4]   = { "mxfp4",   32,  1 + 16,                false, false },
};

const si_type_traits *si_type_get(uint32_t type)
{
    if (type >= SI_TYPE_COUNT || type_table[type].name == NULL)
        return NULL;
    return &type_table[type];
}

bool si_type_valid(uint32_t type) { return si_type_get(type) != NULL; }

const char *si_type_name(uint32_t type)
{
    const si_type_traits *t = si_type_get(type);
    return t ? t->name : NULL;
}

int si_type_from_name(const char *name)
{
    if (name == NULL)
        return -1;
    for (uint32_t i = 0; i < SI_TYPE_COUNT; i++) {
        const char *n = type_table[i].name;
        if (n == NULL || strlen(n) != strlen(name))
            continue;
        size_t k = 0;
        while (n[k] && tolower((unsigned char)n[k]) == tolower((unsigned char)name[k]))
            k++;
        if (n[k] == '\0')
            return (int)i;
    }
    return -1;
}

uint64_t si_type_row_bytes(uint32_t type, int64_t n)
{
    const si_type_traits *t = si_type_get(type);
    if (t == NULL || n < 0 || (uint64_t)n % t->block_elems != 0)
        return 0;
    uint64_t blocks = (uint64_t)n / t->block_elems;
    if (blocks > UINT64_MAX / t->block_bytes)
        return 0;
    return blocks * t->block_bytes;
}
