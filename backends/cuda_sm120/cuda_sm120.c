/* backends/cuda_sm120/cuda_sm120.c — the CUDA backend's descriptor, probe
 * and memory ops.
 *
 * State of this plugin: device selection, the launch self-test, device
 * memory and host<->device copies are real.  The compute ops (quantised
 * GEMV, paged KV attention, GDN, MoE) are the work of the CUDA backend
 * issue; until they land, supports() answers false for every op and
 * kv_create refuses, so the core reports "cuda_sm120 does not support …"
 * instead of computing garbage.  FIXME(issue 5): compute ops. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <sparkinfer/plugin.h>

#include "cuda_internal.h"

struct si_backend {
    const si_host *host;
    int            device;
    char           device_name[256];
};

struct si_buf {
    void    *dev;
    uint64_t nbytes;
};

/* Compute capabilities this fatbin is built for: 9.x (H100/H200, the test
 * GPUs) and 12.x (RTX 5090, the target the backend is named for). */
static bool cc_supported(int major) { return major == 9 || major == 12; }

static int cuda_probe(const si_host *h, si_err *err)
{
    (void)h;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EREFUSED, "no usable CUDA driver/device: %s",
                          cudaGetErrorString(e));
    if (n == 0)
        return si_err_set(err, SI_EREFUSED, "no CUDA device present");
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) == cudaSuccess && cc_supported(p.major))
            return SI_OK;
    }
    struct cudaDeviceProp p0;
    if (cudaGetDeviceProperties(&p0, 0) != cudaSuccess)
        return si_err_set(err, SI_EREFUSED, "cannot query CUDA device 0");
    return si_err_set(err, SI_EREFUSED,
                      "device 0 '%s' has compute capability %d.%d; cuda_sm120 needs 9.x or 12.x",
                      p0.name, p0.major, p0.minor);
}

static int cuda_open(const si_host *h, const char *section, si_backend **out, si_err *err)
{
    int device = 0;
    const char *dv = h->cfg_get(h, section, "device");
    if (dv != NULL) {
        char *end = NULL;
        long v = strtol(dv, &end, 10);
        if (end == dv || *end != '\0' || v < 0 || v > 64)
            return si_err_set(err, SI_EINVAL, "[%s] device = '%s': not a device index", section, dv);
        device = (int)v;
    }
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, "CUDA device %d: %s", device, cudaGetErrorString(e));
    if (!cc_supported(p.major))
        return si_err_set(err, SI_EUNSUPPORTED, "CUDA device %d '%s' is sm_%d%d; need 9.x or 12.x",
                          device, p.name, p.major, p.minor);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));

    unsigned *probe_buf = NULL;
    if ((e = cudaMalloc((void **)&probe_buf, 256 * sizeof(unsigned))) != cudaSuccess)
        return si_err_set(err, SI_ENOMEM, "cudaMalloc: %s", cudaGetErrorString(e));
    int rc = si_cuda_selftest_launch(probe_buf, 256);
    unsigned host_copy[256];
    if (rc == 0)
        rc = (int)cudaMemcpy(host_copy, probe_buf, sizeof host_copy, cudaMemcpyDeviceToHost);
    cudaFree(probe_buf);
    if (rc != 0)
        return si_err_set(err, SI_EDEVICE,
                          "kernel launch self-test failed on sm_%d%d: %s (was the fatbin built for this SM? see --with-cuda-arch)",
                          p.major, p.minor, cudaGetErrorString((cudaError_t)rc));
    for (unsigned i = 0; i < 256; i++)
        if (host_copy[i] != (0x5a5a0000u ^ (i * 2654435761u)))
            return si_err_set(err, SI_EDEVICE, "kernel self-test wrote wrong data at word %u", i);

    si_backend *b = calloc(1, sizeof *b);
    if (b == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    b->host = h;
    b->device = device;
    snprintf(b->device_name, sizeof b->device_name, "%s", p.name);
    h->log(h, SI_LOG_INFO, "cuda_sm120", "device %d: %s, sm_%d%d, %.1f GiB", device, p.name,
           p.major, p.minor, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    *out = b;
    return SI_OK;
}

static void cuda_close(si_backend *b)
{
    free(b);
}

static int cuda_buf_alloc(si_backend *b, uint64_t nbytes, si_buf **out, si_err *err)
{
    si_buf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    cudaError_t e = cudaMalloc(&buf->dev, nbytes ? nbytes : 1);
    if (e != cudaSuccess) {
        free(buf);
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return si_err_set(err, SI_ENOMEM, "device %d: cannot allocate %llu bytes (%zu free): %s",
                          b->device, (unsigned long long)nbytes, free_b, cudaGetErrorString(e));
    }
    buf->nbytes = nbytes;
    *out = buf;
    return SI_OK;
}

static void cuda_buf_free(si_backend *b, si_buf *buf)
{
    (void)b;
    if (buf == NULL)
        return;
    cudaFree(buf->dev);
    free(buf);
}

static int check_range(const si_buf *buf, uint64_t off, uint64_t n, si_err *err)
{
    if (off > buf->nbytes || n > buf->nbytes - off)
        return si_err_set(err, SI_ERANGE, "copy [%llu, +%llu) outside a %llu-byte buffer",
                          (unsigned long long)off, (unsigned long long)n,
                          (unsigned long long)buf->nbytes);
    return SI_OK;
}

static int cuda_upload(si_backend *b, si_buf *dst, uint64_t off, const void *src, uint64_t n, si_err *err)
{
    (void)b;
    int rc = check_range(dst, off, n, err);
    if (rc != SI_OK)
        return rc;
    cudaError_t e = cudaMemcpy((char *)dst->dev + off, src, n, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? SI_OK : si_err_set(err, SI_EDEVICE, "upload: %s", cudaGetErrorString(e));
}

static int cuda_download(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, si_err *err)
{
    (void)b;
    int rc = check_range(src, off, n, err);
    if (rc != SI_OK)
        return rc;
    cudaError_t e = cudaMemcpy(dst, (const char *)src->dev + off, n, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? SI_OK : si_err_set(err, SI_EDEVICE, "download: %s", cudaGetErrorString(e));
}

static int cuda_kv_create(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *err)
{
    (void)b; (void)d; (void)out;
    return si_err_set(err, SI_EUNSUPPORTED, "cuda_sm120: the paged KV cache is not implemented yet");
}

static void cuda_kv_free(si_backend *b, si_kv *kv) { (void)b; (void)kv; }

static int cuda_kv_seq_reset(si_backend *b, si_kv *kv, uint32_t seq, si_err *err)
{
    (void)b; (void)kv; (void)seq;
    return si_err_set(err, SI_EUNSUPPORTED, "cuda_sm120: no KV cache");
}

static bool cuda_supports(const si_backend *b, const si_op *op)
{
    (void)b; (void)op;
    return false;   /* no compute op yet: the core must say so, not fall back silently */
}

static int cuda_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
{
    (void)b;
    return si_err_set(err, SI_EUNSUPPORTED, "cuda_sm120: op kind %u is not implemented yet",
                      n_ops ? ops[0].kind : 0u);
}

static const struct si_backend_ops cuda_ops = {
    .size = sizeof(struct si_backend_ops),
    .open = cuda_open,
    .close = cuda_close,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .kv_create = cuda_kv_create,
    .kv_free = cuda_kv_free,
    .kv_seq_reset = cuda_kv_seq_reset,
    .supports = cuda_supports,
    .exec = cuda_exec,
};

SI_PLUGIN_DEFINE(SI_KIND_BACKEND, "cuda_sm120", "0.1.0",
                 "CUDA backend for sm_90/sm_120 (device memory only; compute ops pending)",
                 cuda_probe, &cuda_ops, NULL)
