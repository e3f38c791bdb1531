/* backends/cuda_sm120/cuda_backend.h — the plugin's objects, shared by the
 * C files (cuda_sm120.c: objects and memory; cuda_ops.c: supports/exec).
 * Nothing here is visible outside the .so (-fvisibility=hidden). */
#ifndef SI_CUDA_BACKEND_H
#define SI_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <sparkinfer/plugin.h>

#define CU_NAME "cuda_sm120"

struct si_backend {
    const si_host *host;
    int            device;
    char           device_name[256];
    cudaStream_t   stream;          /* every op of exec runs on it, in order */
    uint32_t       kv_type;         /* SI_TYPE_F16 (default) or SI_TYPE_F32  */
    void          *ws;              /* device workspace of the running op    */
    size_t         ws_size;
    int32_t       *ids_host;        /* GET_ROWS id check (host copy)         */
    size_t         ids_cap;
};

struct si_buf {
    void    *dev;
    uint64_t nbytes;
};

struct si_kv {
    si_kv_desc d;
    bool       f16;
    uint32_t   elem;                /* bytes per element                     */
    /* K and V: [layer][seq][ctx][kv_head][head_dim] */
    uint8_t   *k, *v;
    uint64_t   layer_bytes;         /* bytes of one layer of K (or V)        */
    uint32_t  *len;                 /* host [layer][seq]: positions filled   */
};

/* Device workspace of at least `bytes` (grown after a stream sync); NULL
 * with err set when it cannot be had.  Valid until the next call. */
void *cu_ws_reserve(si_backend *b, size_t bytes, si_err *err);

bool cu_supports(const si_backend *b, const si_op *op);
int  cu_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err);

#endif
