// tests/cuda/emu/emu.cc — the block scheduler of the host CUDA emulation
// (see cuda_runtime.h here): a block's threads are fibers on one OS thread,
// run round-robin until each reaches a barrier; a block barrier releases
// when every thread is at it, a warp barrier when its 32 lanes are.
#include "cuda_runtime.h"
// Minimal x86-64 context switch (callee-saved registers + stack pointer):
// swapcontext would cost two sigprocmask syscalls per switch.
extern "C" void emu_switch(void **save_sp, void *new_sp);
asm(R"(
.text
.globl emu_switch
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
)");
namespace emu {
dim3 threadIdx, blockIdx, blockDim, gridDim;
enum { READY, AT_BLOCK, AT_WARP, DONE, SPIN };
struct fiber { void *sp; int st; dim3 tid; std::vector<char> stack; };
static std::vector<fiber> fs;
static void *sched_sp;
static int cur;
static const std::function<void()> *body_fn;
static std::vector<char> smem_buf;
static unsigned char xbuf[32][32][16];
float *dyn_smem() { return (float *)(((uintptr_t)smem_buf.data() + 255) & ~(uintptr_t)255); }
static void yield(int st) { fs[cur].st = st; emu_switch(&fs[cur].sp, sched_sp); }
void sync_block() { yield(AT_BLOCK); }
// a spinning thread (an mbarrier wait) lets the others run: it is woken
// (made READY) only when no thread can run and no barrier can release,
// so barriers and warps make progress while it spins
void spin() { yield(SPIN); }
void sync_warp() { yield(AT_WARP); }
void xchg(const void *in, void *out, int size, int src)
{
    int w = cur / 32, l = cur % 32;
    memcpy(xbuf[w][l], in, size);
    sync_warp();
    memcpy(out, xbuf[w][src], size);
    sync_warp();
}
static void tramp() { (*body_fn)(); fs[cur].st = DONE; emu_switch(&fs[cur].sp, sched_sp); abort(); }
}
static unsigned drift_state;
static bool drift = [] { const char *e = getenv("EMU_DRIFT"); drift_state = e ? (unsigned)atoi(e) * 2654435761u + 1 : 0; return e != nullptr; }();
static unsigned drift_next() { drift_state = drift_state * 1664525u + 1013904223u; return drift_state >> 8; }
static unsigned fiber_state;
static bool fiber_order = [] { const char *e = getenv("EMU_FIBER_ORDER"); fiber_state = e ? (unsigned)atoi(e) * 2246822519u + 3 : 0; return e != nullptr; }();
static unsigned fiber_next() { fiber_state = fiber_state * 1664525u + 1013904223u; return fiber_state >> 8; }
void emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body)
{
    using namespace emu;
    int n = (int)(block.x * block.y * block.z);
    if (block.y != 1 || block.z != 1 || n % 32 || n > 1024) { fprintf(stderr, "emu: block shape\n"); abort(); }
    body_fn = &body;
    gridDim = grid; blockDim = block;
    // 1 KiB canary after the dynamic shared memory: a store past its end
    // shows (checked after every block)
    smem_buf.assign(smem + 256 + 1024, (char)0x7f);
    const size_t smem_size = smem;
    fs.resize(n);
    for (auto &f : fs) if (f.stack.empty()) f.stack.resize(256 * 1024);
    // EMU_BLOCK_ORDER=seed: the blocks in a shuffled order (seeded), not
    // x fastest from 0, so a kernel that assumes which block runs last
    // (a count of finished blocks is the right way) shows.
    std::vector<dim3> order;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++)
                order.push_back(dim3(bx, by, bz));
    if (const char *e = getenv("EMU_BLOCK_ORDER")) {
        unsigned st = (unsigned)atoi(e) * 2654435761u + 7;
        for (size_t i = order.size(); i > 1; i--) {
            st = st * 1664525u + 1013904223u;
            std::swap(order[i - 1], order[(st >> 8) % i]);
        }
    }
    for (const dim3 &bi : order) {
        const unsigned bx = bi.x, by = bi.y, bz = bi.z;
        blockIdx = bi;
        // garbage-ish fill, per block: reading smem no thread of this block wrote shows
        memset(dyn_smem(), 0x7f, smem_size);
        memset((char *)dyn_smem() + smem_size, 0x5a, 1024);
        for (int i = 0; i < n; i++) {
            fiber &f = fs[i];
            uintptr_t top = ((uintptr_t)f.stack.data() + f.stack.size()) & ~(uintptr_t)15;
            void **sp = (void **)top;
            *--sp = nullptr;              // tramp's (unused) return address
            *--sp = (void *)&tramp;       // where emu_switch's ret goes
            for (int r = 0; r < 6; r++)
                *--sp = nullptr;          // rbp rbx r12..r15
            f.sp = sp;
            f.st = READY;
            f.tid = dim3((unsigned)i);
        }
        // EMU_FIBER_ORDER=seed: each round runs the threads in a new random
        // order, not 0..n-1, so a thread that signals others before its
        // own warp is done (an mbarrier arrive without the __syncwarp)
        // lets them run in between, as the hardware may
        std::vector<int> perm(n);
        for (int i = 0; i < n; i++) perm[i] = i;
        for (;;) {
            bool ran = false;
            if (fiber_order)
                for (int i = n; i > 1; i--) std::swap(perm[i - 1], perm[fiber_next() % (unsigned)i]);
            for (int k = 0; k < n; k++)
                if (const int i = perm[k]; fs[i].st == READY) {
                    cur = i; threadIdx = fs[i].tid; ran = true;
                    emu_switch(&sched_sp, fs[i].sp);
                }
            if (ran) continue;
            int done = 0, atb = 0;
            for (auto &f : fs) { done += f.st == DONE; atb += f.st == AT_BLOCK; }
            if (done == n) break;
            bool rel = false;
            // EMU_DRIFT=seed: release ONE warp (a random one of those at a
            // warp barrier) per round instead of all, so warps drift apart
            // between block barriers and a missing __syncthreads shows.
            const int nw = n / 32, w0 = drift ? (int)(drift_next() % (unsigned)nw) : 0;
            for (int wi = 0; wi < nw && !(drift && rel); wi++) {
                const int w = (w0 + wi) % nw;
                int d = 0, a = 0;
                for (int l = 0; l < 32; l++) { d += fs[w*32+l].st == DONE; a += fs[w*32+l].st == AT_WARP; }
                if (a > 0 && a + d == 32) { rel = true; for (int l = 0; l < 32; l++) if (fs[w*32+l].st == AT_WARP) fs[w*32+l].st = READY; }
                else if (a > 0 && d > 0) { fprintf(stderr, "emu: warp %d: warp barrier with exited lanes\n", w); abort(); }
            }
            if (rel) continue;
            bool woke = false;
            for (auto &f : fs) if (f.st == SPIN) { f.st = READY; woke = true; }
            if (woke) continue;
            if (atb + done == n && atb > 0) {
                if (done > 0) { fprintf(stderr, "emu: __syncthreads after %d threads exited\n", done); abort(); }
                for (auto &f : fs) if (f.st == AT_BLOCK) f.st = READY;
                continue;
            }
            fprintf(stderr, "emu: deadlock in block (%u,%u,%u): %d at block barrier, %d done, rest at warp barriers\n", bx, by, bz, atb, done);
            abort();
        }
        for (size_t i = 0; i < 1024; i++)
            if (((unsigned char *)dyn_smem())[smem_size + i] != 0x5a) {
                fprintf(stderr, "emu: block (%u,%u,%u) wrote shared memory past its %zu bytes (at +%zu)\n", bx, by, bz, smem_size, i);
                abort();
            }
    }
}
