/* backends/cuda_sm120/cuda_sm120.c — the CUDA backend's descriptor, probe,
 * open/close, device memory, weights, the KV cache and sync.  The compute
 * ops (supports/exec) are in cuda_ops.c, the kernels in the .cu files.
 *
 * Knobs ([backend.cuda_sm120], read with host->cfg_get):
 *   device  = N           CUDA device index (default 0)
 *   kv_type = int8 (or i8) | f16 | f32
 *                         KV cache of the full-attention layers (unset:
 *                         [runtime] kv_type, whose auto means i8; see
 *                         backends/common/si_kvknob.h): dense f16 or f32, or int8: paged
 *                         (16 positions a page), int8 K and V with an f32
 *                         scale per (position, kv head), page table per
 *                         sequence, pages taken on append and returned by
 *                         kv_seq_reset (cuda_kv.c, cuda_attn_i8.cu).  The
 *                         attention is exact over every position in all
 *                         three; i8 adds the int8 rounding of K and V.
 *                         Default i8 (half the bytes and memory of f16; f16
 *                         for fidelity comparisons).  H100, new ring knobs,
 *                         ctx 4096 bs 1 / 8 / 32, f16 -> i8 tok/s: 9b 352.4
 *                         -> 349.8, 1,180 -> 1,185, 2,221 -> 2,325;
 *                         35b-a3b 342.3 -> 342.4, 1,094 -> 1,094, 1,692 ->
 *                         1,707; bs 1 ctx 32768: 9b 316.5 -> 318.9,
 *                         35b-a3b 319.2 -> 320.7; prefill of 4096 -1.9%
 *                         (9b) / -2.6% (35b-a3b).  check_cuda_model, i8:
 *                         top-1 >= 0.9944, mean KL <= 5.4e-05.
 *   kv_pages = N          i8 only: pages in the pool (per layer; default
 *                         n_seq x ceil(n_ctx / 16), what the dense cache
 *                         holds).  Fewer pages let more sequences share
 *                         memory; an append that finds no free page fails
 *                         with SI_ENOMEM naming sequence and position.
 *   matmul  = dp4a | f32  MATMUL/MOE products with Q8_0/Q4_K/Q5_K/Q6_K
 *                         weights and <= 8 columns (any number for the
 *                         per-token experts): dp4a (default) quantises the
 *                         activations to int8 blocks of 32 (f32 scale and
 *                         exact f32 block sum) once per input and multiplies
 *                         with __dp4a — the same arithmetic as the cpu
 *                         backend's default int8 path (cuda_mmq.cu); f32
 *                         decodes the weights to f32 and accumulates in f32
 *                         (parity with the cpu backend's matmul = ref, for
 *                         fidelity comparisons; 2.5x slower at 9b decode).
 *   gemv    = v1 | v2     the dp4a decode GEMV above: v1 (default,
 *                         cuda_mmq.cu) is one warp per row; v2
 *                         (cuda_gemv.cu) keeps several rows per lane group
 *                         and the next unit's weights in flight, and runs
 *                         an expert's gate and up projections (MOE) in one
 *                         launch.  Same integer terms; f32 summation order
 *                         differs only for rows of < 32 units (in < 1024;
 *                         < 512 for Q8_0).  v1 is the default because it
 *                         measured faster on the H200: 9b decode 206.7 vs
 *                         191.6 tok/s (ctx 4096); bench_gemv Q4_K 12288x4096
 *                         1510 vs 1324 GB/s (35b MoE decode: v2 1.1x).
 *   prefill_mm = mma | gemv  dense MATMUL/MOE products of more than 8
 *                         columns (prefill; with mma a MATMUL of 9..32
 *                         runs on gemv_mma_wide's kernel where that is on)
 *                         with Q8_0/Q4_K/Q5_K/Q6_K
 *                         weights: mma (default) quantises the activations
 *                         as dp4a does (bit-identical to the cpu backend's
 *                         int8 path) and runs an int8 tensor-core GEMM
 *                         (cuda_mma2.cu / cuda_mma.cu, see mma_tile),
 *                         reading each weight once per 128 (v1: 64)
 *                         columns; gemv keeps the `matmul` path above, 8
 *                         columns per pass.  `matmul` still governs <= 8
 *                         columns (decode) and the per-token experts.
 *   mma_tile = v2 | v1    the prefill_mm = mma GEMM: v2 (default) 128x128
 *                         tiles (64x128 where 128-row ones leave SMs idle),
 *                         one fma per scaled block term, one barrier per
 *                         k-tile (cuda_mma2.cu); v1 the 128x64 kernel
 *                         (cuda_mma.cu), kept for A/B.  Same int32 block
 *                         terms; f32 rounding differs in the last bits.
 *   mma_weights = i8 | gguf  the prefill_mm = mma GEMM's weights: i8
 *                         (default) requantises the weight matrix of each
 *                         product to int8 with one scale per 128 of a row
 *                         and the activations likewise, so the tensor cores
 *                         carry the sums over 128 and the f32 work is one
 *                         epilogue per 128 (cuda_w8.cu, v3); gguf multiplies
 *                         the GGUF blocks exactly (mma_tile above).  i8
 *                         adds a second rounding of the weights (see
 *                         cuda_w8.cu's header).
 *   w8_block = 128 | 32   mma_weights = i8: the k-width of one int8 scale.
 *                         128 (default): one f32 epilogue per 128; 32:
 *                         per 32, near-lossless weights and the dp4a
 *                         path's own activations (the precision A/B).
 *   w8_cache = true | false  mma_weights = i8: keep each weight matrix's
 *                         int8 copy after its first product (while 1/16 of
 *                         the device's memory, >= 1 GiB, stays free), so
 *                         later prefill chunks skip the requantisation;
 *                         false: requantise every product (the A/B).
 *   f32_gemm = tiled | gemv  products of weights stored as floats (F32,
 *                         F16, BF16: the MOE router, GDN alpha/beta) over
 *                         >= 64 columns (prefill): tiled (default) a 64 x
 *                         64 shared-memory f32 GEMM (cuda_matmul.cu
 *                         mm_tiled_kernel); gemv the GEMV-style mm_kernel,
 *                         each weight row re-read per 8 columns (a
 *                         2048-token 35b router product: 1.19 ms on the
 *                         H200).  tiled sums each output in k order, gemv
 *                         in lane-strided parts: not the same bits.  H200,
 *                         35b-a3b prefill: 9,577 / 16,650 vs 8,484 / 12,411
 *                         tok/s at 512 / 4096 tokens.
 *   pdl = true | false    programmatic dependent launch for the decode
 *                         step's kernels (the int8 GEMV and quantiser,
 *                         RMSNORM, ADD/SWIGLU, the GDN conv, rows and
 *                         norm, RoPE, K/V append, split-K GQA attention
 *                         and its combine, the MoE router, SwiGLU and
 *                         combine; cuda_launch.cuh): each may be
 *                         resident while the kernel before it drains and
 *                         waits for it on the device, hiding a launch per
 *                         kernel; false: plain stream order (the A/B).
 *   attn    = split | simple  ATTN core: split (default) cuts each token's
 *                         context into chunks handled by separate blocks,
 *                         each reading K/V once for all query heads of a
 *                         kv head, then merges them (flash-decoding: the
 *                         GPU stays full for one decoding token at long
 *                         context); simple is one block per (token, head)
 *                         over the whole context.  Both exact (cuda_attn.cu).
 *   attn_mma = true | false  (with attn_gqa = shared) the split core over
 *                         the f16 dense cache on the f16 tensor cores
 *                         (cuda_attn_mma.cu): S = K Q^T and O = V^T P^T by
 *                         mma.sync for all query heads of a kv head, q and
 *                         p rounded to f16 (f32 sums), where split_gqa's
 *                         5 shuffles per (position, head) left one block
 *                         ~25 us of dependent instructions per tile (35b
 *                         decode, H200).  Same plan, partials, combine;
 *                         false: split_gqa_kernel (A/B).
 *   attn_ring = false | true | small  (head_dim 128 or 256) decode's
 *                         split core over the f16 cache (with attn_mma, in
 *                         its place) and over the paged int8 cache (in
 *                         split_i8_kernel's place) on the f16 tensor
 *                         cores, each warp streaming its own 16-position
 *                         groups (a page of the int8 cache) of K and V
 *                         through a cp.async ring, no block barrier until
 *                         the warps' merge (cuda_attn_ring.cu): true is 4
 *                         warps x 3 stages (f16: 212 KB at head_dim 256,
 *                         one block an SM on an H200) or x 4 (int8: 185
 *                         KB), small 2 x 2 (f16 79 KB, int8 64 KB: fits
 *                         sm_120's 99 KB, which true then falls back to);
 *                         where neither fits, the other core runs.  The
 *                         split plan then makes one split per resident
 *                         block (attn_split_blocks does not apply).  q and
 *                         p rounded to f16 (int8 K and V convert exactly),
 *                         f32 sums, the same partials.
 *                         Default true (H200, bs 1, tok/s off -> on,
 *                         ctx 4096 / 32768): int8 pages 9b 374.0 / 271.1
 *                         -> 404.7 / 356.3, 35b-a3b 339.0 / 234.3 ->
 *                         376.5 / 348.9; f16 9b 411.2 / 374.1 -> 413.7 /
 *                         377.2 (another call: 410.8 / 373.7 -> 412.5 /
 *                         369.4), 35b-a3b 378.4 / 349.6 -> 382.8 / 355.0;
 *                         f16 bs 8 -0.8% to +2.4%.  false keeps split_mma_kernel
 *                         and split_i8_kernel (A/B).
 *   attn_ring_pages = ahead | each  (with attn_ring, kv_type = i8) the
 *                         ring over the int8 pages: each reads a
 *                         16-position group's page from the page table
 *                         (after the sequence's id: two dependent L2
 *                         reads) as the warp issues the group's copies,
 *                         in the warp's chain; ahead reads a warp's pages
 *                         32 groups at a time, a chunk before they are
 *                         issued, one a lane, and takes each by a shuffle
 *                         (the same bits).  Why: at 32k the int8 ring
 *                         moved its half of the f16 bytes at ~1.4 TB/s
 *                         where the f16 ring ran near 4.3 (9b, H200: 4k
 *                         -> 32k cost 336 us a step vs 219 for f16).
 *   attn_ring_chains = 1 | 2  (with attn_ring) the ring's scores S^T =
 *                         K Q^T: 1 sums the head's 16-wide steps into one
 *                         accumulator, a chain of head_dim / 16 dependent
 *                         mma a group; 2 the even and odd steps into two,
 *                         added at the end (half the chain; another f32
 *                         order).  Both caches.
 *                         Defaults ahead and 2.  H100 (stop 36) bs 1, ctx
 *                         4096 / 32768, tok/s: int8 pages 9b each 354.9 /
 *                         321.7, ahead 355.3 / 325.4, ahead + 2 355.9 /
 *                         327.5; 35b-a3b each 338.8 / 319.6, ahead 339.9
 *                         / 320.1; f16 9b chains 1 359.2 / 321.4 (again
 *                         358.5 / 321.0), 2 359.2 / 322.2.
 *   upload_staged = true | false  upload() of up to 64 KiB (a decode step's
 *                         ids and wanted rows) copied into the pinned
 *                         staging arena and only enqueued, ordered on the
 *                         stream (the next exec waits on its event before
 *                         reusing the arena); false: a pageable copy and a
 *                         stream sync, a round trip each decode step.
 *                         Default true: check_cuda_backend:small_uploads
 *                         passes on the H100; 9b bs 1 ctx 4096 358.6 vs
 *                         358.3 tok/s with false (the same; the GPU idles
 *                         through less host time on slower hosts).
 *   download_pinned = true | false  download() of up to 64 KiB (a decode
 *                         step's top-K rows) copied into one of
 *                         download_start's pinned slots, with the
 *                         GET_ROWS error flag behind it, one wait for
 *                         both, then to the caller's
 *                         memory; false: a pageable copy (which waits for
 *                         the stream itself) and then the flag's copy and
 *                         a second sync: two round trips a step.
 *   host_ids = true | false  SI_OP_HOST_IDS and post_ids (plugin.h 1.4):
 *                         a sampled decode step is queued before the host
 *                         has drawn its token, which a one-warp kernel at
 *                         the step's start waits for in mapped memory
 *                         (decode ahead for sampling).  false: not
 *                         offered; the model runs such a step when its
 *                         token is posted (after the draw, as before).
 *                         H100, run -n 200 --temp 1: 9b 392.4 / 392.9 vs
 *                         377.5 / 377.5 tok/s one step at a time (375.5
 *                         with false), 35b-a3b 400.7 / 398.2 vs 380.3 /
 *                         384.4; the same text.
 *   h2d_early = true | false  the per-step numbers of an exec's ATTN ops
 *                         (positions, sequences) and GDN ops (sequence
 *                         runs) copied to the device once, before its
 *                         first op (cuda_h2d.c), instead of by each op
 *                         where it runs: a decode graph's 40 (9b) / 50
 *                         (35b-a3b) memcpy nodes between kernels become
 *                         one at its head, and the ATTN/GDN kernels
 *                         launch early again (programmatic launch).  Same
 *                         numbers, same kernels: the same bits.  H100,
 *                         ctx 4096, tok/s true vs false (same binary,
 *                         twice): bs 1 9b 379.2 / 371.1 vs 351.8 / 355.1,
 *                         35b-a3b 367.4 / 365.6 vs 336.8 / 335.9; bs 8
 *                         9b 1,462 / 1,458 vs 1,422 / 1,411, 35b-a3b
 *                         1,211 / 1,212 vs 1,133 / 1,135; graph device
 *                         time a bs-1 step 2,553.5 vs 2,742.8 us (9b),
 *                         2,635.4 vs 2,874.7 (35b-a3b).
 *   mm_block_cols = 4 (2..9)  float-stored products of <= 2048 rows at
 *                         this many columns up to 8 (decode of 4..8
 *                         sequences: the MOE router 256 x 2048, with
 *                         route_fused its rr_kernel too; small F32
 *                         projections) a block a row, the row's 8-wide
 *                         groups split over the block's 4 warps, as at one
 *                         column; fewer columns (9: all) a warp a row, 4
 *                         rows a block (65 blocks for the 35b-a3b router).
 *                         Another f32 order (the warps' sums added in warp
 *                         order).  H100, 35b-a3b ctx 4096, tok/s 2 vs 9
 *                         (same binary, twice): bs 8 1,282 / 1,280 vs
 *                         1,204 / 1,221, bs 4 921 / 909 vs 890 / 906, bs 2
 *                         621 / 612 vs 629 / 631 (hence 4); rr_kernel at
 *                         bs 8 alone (ncu) 20.0 vs 30.7 us.
 *   attn_gqa = shared | per_head  the split core over the dense f16/f32
 *                         cache: per_head runs split_kernel, each lane
 *                         loading its K/V rows into registers a few at a
 *                         time; shared runs split_gqa_kernel
 *                         (cuda_attn_gqa.cu): the block's K and V tiles
 *                         (16 KB each) fetched by cp.async into shared
 *                         memory, once for all query heads of the kv head,
 *                         the next K tile in flight during the softmax and
 *                         V pass (more bytes in flight at long context).
 *                         Same plan, partials and combine; f32 order
 *                         differs only where the tile is < 64 positions.
 *                         shared is the default: decode on the H200 at
 *                         32k, 35b-a3b 149.0 vs 126.0 tok/s, 9b 182.0 vs
 *                         176.7; at 4k 172.5 vs 167.5 and 212.6 vs 206.1.
 *   gemv_quad = true | false  the v1 GEMV's one-column products of Q4_K,
 *                         Q5_K and Q6_K rows of in % 2048 == 0 (no
 *                         experts) go through cuda_gemvq.cu: four lanes a
 *                         block, a lane's sub-block fixed (no divergent
 *                         scale decode), the first weights loaded before
 *                         the programmatic-launch wait.  Same integer
 *                         terms as v1, another f32 order; false: v1 (A/B).
 *   gemv_quad_experts = true | false  (with gemv_quad) the MOE's decode
 *                         expert products of K-quant rows of in % 512 ==
 *                         0 also go through cuda_gemvq.cu (gqe_kernel: a
 *                         column a block row, the parts of gemv_quad, 2,
 *                         4 or 8 blocks of a row a step); false: v1's
 *                         expert path (A/B).  Same integer terms, another
 *                         f32 order.
 *   gemv_quad_cols = true | false  (with gemv_quad) dense K-quant products
 *                         of 2..8 columns (decode of up to 8 sequences)
 *                         go through gemv_quad's kernel too: each part's
 *                         weights unpacked once for all columns, every
 *                         column's x in shared memory (up to 48 KB, else
 *                         from global); false: v1's units (A/B).  Same
 *                         integer terms, another f32 order.
 *   gemv_mma = true | false  (gemv = v1) dense Q4_K, Q5_K, Q6_K and Q8_0
 *                         products of 2..8 columns (decode of 2..8
 *                         sequences), rows of in % 256 == 0 up to 16384,
 *                         on the int8 tensor cores (cuda_gemvm.cu:
 *                         mma.sync m16n8k32, 16 rows x 8 columns a warp,
 *                         the block's warps splitting the row): a weight
 *                         unpacked once for every column, where the dp4a
 *                         kernels above made 8 dot products of it and were
 *                         bound by instructions at 8 columns.  Taken
 *                         from 4 columns (Q8_0 only where gemv_staged's
 *                         kernel does not take it: cuda_mmq.cu mma_pick).
 *                         Same integer terms, another f32 order; false:
 *                         those kernels (A/B).  H200 decode at ctx 4096,
 *                         same binary: 9b bs 8 1,264.6 / 1,263.7 tok/s vs
 *                         767.5, bs 4 763.6 / 757.9 vs 715.9; 35b-a3b bs 8
 *                         1,211.9 / 1,209.4 vs 1,063.6, bs 4 873.1 / 870.8
 *                         vs 783.6; bs 1-2 untouched.
 *   gemv_mma_wide = true | false  (with gemv_mma and prefill_mm = mma) the
 *                         dense products of 9..32 columns (decode of 9..32
 *                         sequences) on that file's gx_kernel: 2 or 4
 *                         column tiles of 8 a warp (a weight unpacked once
 *                         for all), x staged in shared memory per block of
 *                         32 rows (128 for the LM heads).  They ran on the
 *                         prefill GEMM (128-column tiles; with mma_weights
 *                         = i8, the default, on requantised weights); now
 *                         the same integer terms as the cpu's int8 path,
 *                         another f32 order.  false: that GEMM (A/B).  H200
 *                         decode at ctx 4096, same binary: 9b bs 16
 *                         1,825.8 tok/s vs 1,100.2, bs 32 2,388.0 vs
 *                         2,037.0; 35b-a3b bs 16 1,378.4 vs 1,068.1, bs 32
 *                         1,403.5 vs 1,334.6 (its MOE, untouched, is most
 *                         of a bs-32 step).
 *   gemv_wide_db = false | true  (with gemv_mma_wide) gx_kernel stages
 *                         the next round's x (4 steps of every column) in
 *                         a second shared buffer while it multiplies the
 *                         current one, where it staged, waited and then
 *                         multiplied (ncu, H100, 9b decode at 16 columns:
 *                         12-24% of the SM's warps active, 27-32% of the
 *                         issue slots busy, 6-10 cycles between a warp's
 *                         instructions).  Same bits; 88 KiB of shared
 *                         memory a block at 4 column tiles.  Measured and
 *                         kept off: H100 ctx 4096, false -> true, 9b bs 16
 *                         1,775.9 / 1,766.3 -> 1,747.7 / 1,745.5 tok/s, bs
 *                         32 2,333.1 / 2,330.4 -> 2,165.0 / 2,166.5;
 *                         35b-a3b bs 16 1,330.1 -> 1,341.9, bs 32 1,706.2
 *                         -> 1,712.6.  So the staging wait is not what
 *                         holds it back; a guess, not measured: the larger
 *                         shared carve-out leaves less L1 for the weights'
 *                         loads.  See the stop 36 note.
 *   gemv_wide_regs = full | capped | small  (with gemv_mma_wide, not
 *                         with gemv_wide_db) gx_kernel's registers: full
 *                         compiles it for one block an SM (171-254
 *                         registers, no spills); capped for two blocks an
 *                         SM (128 registers, where ptxas spills 150-380
 *                         bytes a thread at 4 column tiles: sm_90a,
 *                         -Xptxas -v); small: full only for a launch of no
 *                         more blocks than multiprocessors.  Same
 *                         arithmetic, same bits.  H200, ctx 1024, same
 *                         binary (stop 37), capped -> full: 9b bs 32
 *                         2,522.8 / 2,494.3 / 2,544.8 -> 2,651.6 / 2,690.2
 *                         tok/s, bs 16 1,885.8 / 1,892.0 / 1,879.2 ->
 *                         1,870.0 / 1,869.7; 35b-a3b bs 32 1,848.3 /
 *                         1,852.3 / 1,848.6 -> 1,976.5 / 1,965.0, bs 16
 *                         1,453.0 / 1,458.4 / 1,447.8 -> 1,517.7 / 1,500.2.
 *   gemv_wide_split = false | true  (with gemv_mma_wide; takes over
 *                         from gemv_wide_db and the row tiles) gx_kernel
 *                         at 128 rows a block, so a staged x serves 4x the
 *                         rows (at 32 rows a block the x a block stages
 *                         is ~2.5x the weights it reads), x staged a round
 *                         ahead, and where that leaves fewer than two
 *                         blocks an SM (the 9b's ffn_down: 32 blocks) the
 *                         rows' steps split over a thread-block cluster of
 *                         2 or 4 blocks, added in rank order through
 *                         distributed shared memory (no atomics, no
 *                         workspace).  Another f32 order than false.
 *                         Measured slower, kept off: H200, ctx 1024,
 *                         capped registers, false -> true: 9b bs 32
 *                         2,522.8 / 2,494.3 -> 2,126.2 / 2,106.7 tok/s, bs
 *                         16 1,885.8 / 1,892.0 -> 1,768.4 / 1,740.4;
 *                         35b-a3b bs 32 1,848.3 / 1,852.3 -> 1,810.9 /
 *                         1,808.2; with full registers 9b bs 32 2,281.1
 *                         (full alone 2,651.6).  So x's L2 traffic and the
 *                         small grids are not what holds the kernel back
 *                         (with gemv_wide_db's result: nor the staging
 *                         wait); see the stop 37 note.
 *   gemv_wide_ring = kquant | true | false  (with gemv_mma_wide; not
 *                         with gemv_wide_split, nor for the LM heads'
 *                         128-row blocks) gx_kernel's 32-row blocks with
 *                         the weights' next round copied by cp.async into
 *                         a second shared buffer instead of registers
 *                         (gw_kernel, cuda_gemvx.cu), registers capped for
 *                         two blocks an SM: 16 warps an SM where gx_kernel
 *                         has 8 (ncu, H100 9b bs 32: its warps wait on the
 *                         weights' loads, 2 warps a scheduler).  The same
 *                         bits as gx_kernel.  Only where two of its blocks
 *                         fit an SM's shared memory (sm_90; sm_120's 99 KiB
 *                         hold one: gx_kernel there).  kquant (default):
 *                         Q4_K/Q5_K/Q6_K rows; true: Q8_0 too; false: none
 *                         (A/B).  H100, ctx
 *                         1024, same binary, false -> true: 9b bs 16
 *                         1,826.7 / 1,823.2 -> 1,911.6 / 1,909.6 tok/s,
 *                         bs 32 2,629.1 / 2,616.8 -> 2,676.0 / 2,671.6;
 *                         35b-a3b (Q8_0 dense products) bs 16 1,430.7 /
 *                         1,444.1 -> 1,439.2 / 1,436.2, bs 32 1,862.4 /
 *                         1,866.3 -> 1,841.2 / 1,840.5.  ncu (9b bs 32):
 *                         its Q6_K 256-block product 47.3 -> 36.8 us at
 *                         14.5 warps an SM; 128-block ones unchanged (one
 *                         block an SM either way).
 *   gemv_wide_ring_ks8 = true | false  (with gemv_wide_ring, K-quants)
 *                         where a launch has no more blocks than
 *                         multiprocessors (the 9b's 4096-row products at
 *                         bs 9..32: 128 blocks), gw_kernel with 16 warps a
 *                         block (8 k-groups of 2 row tiles), where its 8
 *                         warps leave the SM half as full as two blocks
 *                         would.  Another f32 order (8 k-groups); false:
 *                         KS 4 there too (A/B).  H100, ctx 1024, same
 *                         binary, false -> true: 9b bs 16 1,879.7 /
 *                         1,899.6 -> 2,136.2 / 2,118.7 tok/s (+12%), bs
 *                         32 2,614.3 / 2,639.3 -> 2,866.5 / 2,850.5 (+9%);
 *                         35b-a3b (no K-quant dense products at 9..32
 *                         columns: the same kernels) 1,436.4 -> 1,435.1,
 *                         1,874.8 -> 1,854.8.
 *   gemv_mma_cols = 4 (2..8)  (with gemv_mma) the fewest columns a
 *                         dense product has for gemv_mma's kernels to take
 *                         it (Q8_0 only where gemv_staged's kernel does
 *                         not); fewer stay on gemv_quad_cols' dp4a.  4 was
 *                         measured on gm_kernel (H200 bench_gemv: 9b Q4_K
 *                         12288 x 4096 at 2 columns, dp4a 18.7 vs 25.3
 *                         us); gemv_narrow's kernels at 2..3 columns are
 *                         not yet measured: 2 or 3 is their A/B.
 *   gemv_narrow = kquant | wide | gm  (with gemv_mma, gemv_mma_wide)
 *                         the dense decode products of 2..8 columns
 *                         that gemv_mma takes (from 4 columns; 2..3 stay
 *                         on gemv_quad_cols' dp4a): gm on gm_kernel
 *                         (cuda_gemvm.cu: 16 rows a block, x read from
 *                         the L2 a sub-block at a time, the weights in
 *                         registers); wide on the 9..32-column kernels
 *                         with one column tile (x staged in shared memory
 *                         once for 32 rows; gw_kernel where gemv_wide_ring
 *                         takes the type, at 16 warps where the blocks are
 *                         no more than the SMs, else gx_kernel at RT 2);
 *                         kquant (default): wide for Q4_K/Q5_K/Q6_K, gm
 *                         for Q8_0.  The LM heads (GM_TALL rows) stay on
 *                         gm_kernel.  Another f32 order.  H100, ctx 4096,
 *                         same binary, gm -> wide: 9b bs 2 514.2 / 512.6
 *                         -> 522.5 / 519.7 tok/s, bs 4 708.5 / 699.7 ->
 *                         768.7 / 765.4 (+9%), bs 8 1,198.7 / 1,178.8 ->
 *                         1,403.9 / 1,404.7 (+18%); 35b-a3b (Q8_0 dense
 *                         products, on gx_kernel) bs 2 533.8 / 521.2 ->
 *                         530.6 / 531.7, bs 4 816.4 / 805.1 -> 767.0 /
 *                         789.1 (-4%), bs 8 1,105.3 / 1,082.8 -> 1,084.5
 *                         / 1,091.7: hence kquant.
 *   expert_early = true | false  MOE decode runs the shared expert's
 *                         gate/up before the routed one, so a launch sits
 *                         between the router's and each routed product's:
 *                         gemv_quad_experts' kernel then reads its picks
 *                         and first weights before the programmatic-launch
 *                         wait (the router has completed by then); false:
 *                         routed first, everything after the wait (A/B;
 *                         same bits).
 *   route_fused = batch | true | false  MOE decode of up to 8 tokens
 *                         (float-stored router, E <= 1024) takes the
 *                         router product (and the shared gate row) and the
 *                         top-K in one launch: the last block of the
 *                         router's to finish routes every token
 *                         (cuda_matmul.cu, rr_kernel); true: at every
 *                         batch; batch (default): 2..8 tokens; false: the
 *                         product and route_warp_kernel as two launches
 *                         (A/B; same bits).  Why not at one token: H200
 *                         35b-a3b ctx 4096, same binary, bs 1: 365.9 /
 *                         368.7 tok/s unfused vs 346.1 fused (graph device
 *                         time 2,602 vs 2,662-2,677 us a step); at one
 *                         token the tail (the fence, the count, the last
 *                         block's L2 reads and top-K after every other
 *                         block) is longer than the launch it saves under
 *                         programmatic launch (another machine: 357.5
 *                         batch vs 353.4 true; graph 2,634 vs 2,662).
 *                         bs 8: 1,051.9 fused vs 1,037.7 / 1,030.5
 *                         unfused.
 *   moe_dec_fuse = false | true  MOE decode of up to 8 tokens whose
 *                         routed products run on gemv_quad_experts' kernel
 *                         (and, with a shared expert as wide, its down on
 *                         the dp4a GEMV): the routed gate/up also makes
 *                         the SwiGLU and its int8 copy, the routed down
 *                         the combine, each by the blocks that finish a
 *                         group of rows last (cuda_gemvq.cu,
 *                         gqe_tail_kernel): 5 launches a layer instead of
 *                         7 (the SwiGLU and combine kernels gone); false:
 *                         as before (same bits either way).  Default
 *                         false: H200, 35b-a3b, ctx 4096, same binary:
 *                         346.3 vs 346.0 tok/s at bs 1, 1,058.4 vs 1,058.8
 *                         at bs 8 (no gain: under the graph and
 *                         programmatic launch the launches it removes were
 *                         not what the step waited on);
 *                         check_cuda_ops:moe_dec_fuse passes there.
 *   moe_dec_fuse_gu = true | false  (with moe_dec_fuse) a Q8_0 shared
 *                         expert's gate/up (on gemv_staged's kernel) runs
 *                         in the routed gate/up's launch too, its SwiGLU
 *                         a tail as well (gqe_gs_kernel): 4 launches a
 *                         layer; the routed blocks then read their picks
 *                         after the programmatic-launch wait (the router
 *                         is the launch before).  false: its own launch
 *                         (A/B; same bits; H200 35b-a3b bs 1: 344.3 with
 *                         false, 346.3 with true).
 *   moe_persist = true | false  MOE decode of one token (int8 path, in
 *                         line, a Q8_0 shared expert as wide as the routed
 *                         ones, 512): the whole MOE in one launch of one
 *                         block an SM, its phases (router and the shared
 *                         gate/up; top-K and the routed gate/up; SwiGLU,
 *                         downs and combine) apart by two grid-wide
 *                         barriers (cuda_pmoe.cuh), where false runs six
 *                         launches (A/B, same bits).  The launch is
 *                         cooperative: the driver starts it only with
 *                         every block resident (the barriers need that)
 *                         or refuses it (MPS limits, another process's
 *                         kernels on the SMs): then the six launches run
 *                         for the rest of the open, with a warning.
 *                         History: stop 44 (H100) lost 5.5 us a layer
 *                         (the six overlap under programmatic launch);
 *                         ncu (stop 45/46) found it latency bound, its
 *                         warps waiting at block barriers on the route,
 *                         the SwiGLU copy's serial shuffles and the
 *                         combine's per-row weight reads; those were
 *                         removed (the copy on rms2_q8's two-lane blocks,
 *                         stored straight to its swizzled place; the
 *                         shared gate/up moved to phase 1's idle blocks;
 *                         the route beside h's copy; the weights read
 *                         once a block).  Stop 46, H200: even (403 / 417
 *                         vs 412 / 399 tok/s).  Stop 47, H100 35b-a3b
 *                         ctx 4096 bs 1, same binary, alternated, the
 *                         cooperative launch: 383.9 / 383.9 vs 365.6 /
 *                         366.0 tok/s (+5%); in the graph (profile_twice
 *                         = moe) ~20.6 us a layer against ~27 us for the
 *                         six; greedy tokens the same.  So on.  Stop 51
 *                         (moe_persist_prof): the shared gate/up moved
 *                         beside the route, the router rows spread over
 *                         every block, the SwiGLU made in phase 2: H100
 *                         35b-a3b bs 1 ctx 4096 410.5 / 410.1 / 410.3 vs
 *                         402.8 / 402.7 / 403.7 tok/s (same greedy text).
 *   moe_persist_prof = false | true  (measurement) each moe_persist
 *                         launch's blocks add the SM clocks they spend in
 *                         each part (waiting for the launch before, the
 *                         router, barrier 1, the route, the routed
 *                         gate/up, barrier 2, the SwiGLU copy, the downs)
 *                         to device counters; the means a block, in us,
 *                         are logged (INFO) when the backend closes.  The
 *                         timings of the real chain, which ncu (a kernel
 *                         alone) does not give; costs a few atomics a
 *                         block.
 *   moe_sdc = true | false  MOE decode of one token (int8 path, in line,
 *                         a shared expert as wide as the routed ones whose
 *                         down runs on v1's mmq_kernel): the combine's
 *                         launch also makes the shared expert's down
 *                         product, before its programmatic-launch wait
 *                         (cuda_mmq.cu sdc_kernel: mmq_kernel's lanes and
 *                         order), where that product was a launch of its
 *                         own between the routed down and the combine, a
 *                         link of the chain of dependent launches that
 *                         needed nothing of the routed down's; false: the
 *                         two launches (A/B; same bits).  H200 35b-a3b
 *                         ctx 4096 bs 1, same binary: graph device time
 *                         2,586.8 / 2,583.2 vs 2,602.4 / 2,600.0 us a step
 *                         (-0.6%: the shared down's launch already
 *                         overlapped most of the routed down under
 *                         programmatic launch); tok/s within noise (364.4
 *                         / 364.7 vs 368.1 / 363.1).
 *   moe_overlap = batch | true | false  MOE decode of up to 8 tokens with
 *                         a shared expert as wide as the routed ones
 *                         (without moe_dec_fuse, on the int8 paths): the
 *                         shared expert's gate/up, SwiGLU and down run on
 *                         a second stream forked before the router and
 *                         joined before the combine (a fork in a captured
 *                         graph), beside the router and routed products
 *                         instead of in line.  true: at every batch;
 *                         batch (default): 2..8 tokens; false: in line
 *                         (A/B; same bits).  H200 35b-a3b ctx 4096, same
 *                         binary: bs 8 1,081.3 / 1,094.5 tok/s (batch) vs
 *                         1,059.6 (false), bs 2 and 4 even (560.9 / 572.8
 *                         vs 563.9; 777.6 / 794.3 vs 795.8); with true at
 *                         bs 1 343.1 / 334.3 vs 352.1: one token's
 *                         branches are too short to hide the fork/join
 *                         (full graph edges, no programmatic overlap) and
 *                         the routed gate/up no longer reads its picks
 *                         early.
 *   norm_tail = false | true | one | defer  (with fuse_norm, norm = v2, gemv = v1
 *                         and gemv_quad) a decode product whose output the
 *                         residual ADD and an RMSNORM of hidden-size rows
 *                         follow (the out-projections and ffn downs) does
 *                         that ADD, RMSNORM and the int8 copy for the next
 *                         product in its launch's last block (cuda_gemvq.cu
 *                         gq_norm_tail) instead of a launch of its own:
 *                         true: up to 8 columns; one: one column (decode
 *                         at batch 1); false (default): the fused norm
 *                         kernel after (A/B; same bits).  Not a gain on
 *                         the H200, ctx 4096, same binary: bs 1 9b 359.3 /
 *                         353.0 tok/s (one) vs 355.5 / 359.4 (graph device
 *                         time 2,682 vs 2,631 us a step), 35b-a3b 328.7 /
 *                         321.6 vs 341.1 / 349.4.  ncu (alone): the 9b's
 *                         4096-row Q4_K product 5.8 -> 11.2 us with the
 *                         tail, rms2_kernel 5.0 us: the tail's chain (fence
 *                         and count, L2 reads, the barrier, the stores) is
 *                         as long as the norm kernel's, and serialised
 *                         behind the product where the norm kernel's start
 *                         overlapped it (programmatic launch).
 *                         defer (one column; cuda_ops.c mm_defer_exec,
 *                         cuda_gemvq.cu gqd_kernel): the product's blocks
 *                         of 32 rows each do the ADD, the norm's weight and
 *                         the int8 copy of their own rows and store their
 *                         rows' sum of squares; the norm's scale is taken
 *                         by the products that read the copy (cu_mm.xr:
 *                         their sums times it) and applied in place for
 *                         any other reader (si_cu_xr_resolve, also at the
 *                         list's end): no norm launch and no last block.
 *                         The copy rounds t = (y + b) * w where false
 *                         rounds the normalised values: the int8 path's
 *                         tolerance, not the same bits.  Only where a
 *                         MATMUL reads the norm next (the 9b's norms; the
 *                         35b-a3b's MOE routers read theirs as floats).
 *                         Not a gain (H100, 9b ctx 4096 bs 1, same binary,
 *                         twice): graph device time 2,585.6 / 2,584.9 us a
 *                         step vs 2,539.0 / 2,539.3 (false), 372.8 / 375.1
 *                         vs 382.0 / 380.0 tok/s, though the 64 norms it
 *                         removes cost ~200 us of the chain (profile_twice,
 *                         H200).  Not the programmatic launch's early start
 *                         of the 1024-thread blocks: with pdl = false on
 *                         both arms defer lost more (2,823 / 2,833 vs
 *                         2,725 / 2,721 us), so its products or readers
 *                         themselves cost ~250-300 us more a step (the
 *                         9b's gate/up reader gu_kernel<Q4_K, 8, XR> has 80
 *                         registers and 24 bytes of spill where the plain
 *                         form has 73 and none: the first suspect; ncu of
 *                         each form next).
 *   gemv_glu = true | false  (with gemv_quad, gemv = v1) decode's dense
 *                         ffn gate and up (one column, K-quants) and the
 *                         MOE's routed gate/up (the in-line path, with the
 *                         shared expert's rows when expert_early ran them
 *                         first) make the SwiGLU of their outputs and its
 *                         int8 copy for the down projection in the same
 *                         launch (cuda_gemvq.cu gu_kernel: a block owns 32
 *                         outputs, no count of finished blocks), where
 *                         swiglu_q_kernel was a launch of its own; false:
 *                         that launch (A/B, same bits).  H200, ctx 4096,
 *                         same binary, bs 1: 9b 372.1 / 371.1 / 373.4 vs
 *                         361.6 / 364.2 / 354.1 tok/s (graph device time
 *                         2,560 vs 2,642 us a step), 35b-a3b 341.4 / 346.6
 *                         vs 351.1 / 345.2 (2,710 vs 2,728 us: even); bs 8
 *                         even (the dense form takes one column; the MOE's
 *                         2..8 tokens run moe_overlap's path).
 *   gemv_xsmem = true | false  gemv_quad's kernel reads x (at most 16 KB)
 *                         from a swizzled copy in shared memory, 4 L1
 *                         wavefronts a 16-byte load instead of 16 (x's
 *                         bytes outnumber the weights' at one row a warp).
 *                         Same bits; false: x from global memory (A/B).
 *   fuse_gdn_q = false | true  (with fuse_norm) a GDN whose output the next
 *                         product quantises makes that int8 copy in its
 *                         norm kernel where it runs the state-rows path
 *                         (decode): one launch fewer a GDN layer, the same
 *                         bits.  Off by default: on the H200 the 9b decode
 *                         gains (322.6 vs 315.5 tok/s at ctx 4096) but the
 *                         35b-a3b loses (287.6 vs 291.4), likely the four
 *                         32-step shuffle sums a warp now runs in series
 *                         (cu_q8_block32) against one block a warp in
 *                         quant_x_kernel; true for the dense family.
 *   fuse_attn_q = true | false  (with fuse_norm) an ATTN whose output the
 *                         next product quantises (the out projection) makes
 *                         that int8 copy in combine_kernel where its core
 *                         splits the context (decode; prefill's flash
 *                         attention in splits): a warp of the combine holds
 *                         exactly one block of 32 of the copy, so unlike
 *                         fuse_gdn_q no warp runs blocks in series; one
 *                         launch (quant_x) fewer an attention layer, the
 *                         same bits; false: quant_x's launch (A/B).  Off
 *                         until stop 47 (H200, ctx 4096, tok/s off -> on:
 *                         9b bs 1 411.6 -> 405.4, bs 8 1,240.8 -> 1,257.4;
 *                         35b-a3b bs 1 370.9 -> 377.4, bs 8 1,194.5 ->
 *                         1,204.7: no clear gain).  Stop 47, H100, ctx
 *                         4096 bs 1, same binary, alternated, with
 *                         moe_persist and gdn_early on: 35b-a3b 389.7 /
 *                         389.8 vs 387.6 / 387.6, 9b 380.7 / 380.7 vs
 *                         379.0 / 379.1 (+0.5%); another call: bs 1
 *                         35b-a3b 391.7 / 390.1 vs 389.7 / 389.3, 9b
 *                         386.8 / 385.0 vs 383.3 / 385.6; bs 8 35b-a3b
 *                         1,326.7 / 1,326.0 vs 1,306.8 / 1,307.4 (+1.5%),
 *                         9b 1,502.0 / 1,501.8 vs 1,495.0 / 1,494.9;
 *                         quant_x_kernel is 3.5 us alone (ncu), 10 a
 *                         35b-a3b step: on.
 *   gemv_warps = 8 | 4    warps a block of gemv_quad's K-quant kernel: 8
 *                         halves the blocks and so the copies of x a
 *                         product makes (gemv_xsmem: 4 KB of x a block
 *                         against 9 KB of weights at 4096-wide Q4_K rows;
 *                         32 KB at 8 columns).  Same bits.  H200 decode at
 *                         ctx 4096, three rounds: 9b bs 8 785.8 / 784.0 /
 *                         787.8 tok/s against 742.9 / 745.6 / 747 with 4;
 *                         bs 1 and 35b-a3b within noise (345.5 vs 344.2,
 *                         350.0 vs 349.8).
 *   gemv_staged = true | false  gemv_quad also takes one-column Q8_0
 *                         products (in % 2048 == 0, <= 12288): each warp
 *                         copies its rows through a ring of 4 steps in
 *                         shared memory by cp.async (coalesced; a lane's
 *                         34-byte blocks never align for vector loads),
 *                         x as gemv_xsmem.  Another f32 order than v1;
 *                         false: Q8_0 on v1 (A/B).
 *   gemv_staged_q6 = large | true | false  with gemv_quad, one-column
 *                         Q6_K products (x and 4 steps a warp within
 *                         48 KB: in <= 20480) copy their steps through
 *                         shared memory the same way (g6_kernel; gq_kernel's
 *                         Q6_K loads are 19 unaligned words a lane and
 *                         step); large: only products of 2^28 weights or
 *                         more (the LM heads), true: all, false: none.
 *                         Same bits everywhere.  H200: a long Q6_K product
 *                         3,067 vs 2,669 GB/s, the 9b LM head 3,160 vs
 *                         2,989; but the 9b decode step at ctx 4096 ran
 *                         340.8 (true) vs 345.2 tok/s (false), its Q6_K
 *                         ffn_down staged slower inside the chain.
 *   gemv_q6r = true | false  with gemv_quad, one-column dense Q6_K
 *                         products (in % 2048 == 0) read a copy of their
 *                         weights regrouped so that every lane load is an
 *                         aligned 16-, 8- or 2-byte one (CU_TYPE_Q6R,
 *                         gq_kernel; the LM heads too, in g6_kernel's
 *                         place), made when a dense Q6_K weight is loaded
 *                         or on first use (cuda_regroup.c) while the device
 *                         keeps its free-memory reserve; costs the Q6_K
 *                         weights' bytes again on the device.  false: the
 *                         Q6_K rows (A/B; same bits).  H200, ctx 4096
 *                         bs 1, same binary: 9b 409.4 / 407.5 vs 375.1 /
 *                         371.0 tok/s (graph device time 2,329 vs 2,500 us
 *                         a step; ncu: qkv 27.5 MB 13.5 -> 10.7 us, ffn
 *                         down 41.3 MB 17.9 -> 14.0, LM head 834 MB 266 ->
 *                         203 = 4.1 TB/s); 35b-a3b even (360.1 vs 362.2:
 *                         its one dense Q6_K weight is the LM head).  The
 *                         9b preset's copies take ~1.8 GB.  Since the
 *                         copies are made at load, before the KV cache,
 *                         set false where memory is tight.
 *   gemv_q8r = true | false  the same for one-column dense Q8_0 products
 *                         (in % 2048 == 0, every product of the launch):
 *                         each lane's two 34-byte blocks as four aligned
 *                         16-byte loads on gq_kernel (CU_TYPE_Q8R), in
 *                         gs_kernel's place (its cp.async rings through
 *                         shared memory); gs_kernel's arithmetic, so the
 *                         same bits.  H200 35b-a3b ctx 4096 bs 1, same
 *                         binary: 362.3 / 366.6 vs 356.2 / 356.9 tok/s
 *                         (graph device time 2,516 vs 2,593 us a step);
 *                         its copies take ~1.4 GB (the 9b has no Q8_0).
 *                         Greedy text of both presets identical with both
 *                         knobs on and off.
 *   gemv_regroup_cols = true | false  (with gemv_q6r / gemv_q8r) the
 *                         copies for the products of 2..8 columns that
 *                         gemv_quad_cols takes too (2..3 columns: gemv_mma
 *                         starts at 4), on gq_kernel's columns, e.g. the
 *                         LM head at bs 2; the same sums a column, the
 *                         same bits; false: the GGUF rows there (A/B).
 *                         No more memory: the copies are the one-column
 *                         products'.  H100 ctx 4096, same binary, false
 *                         -> true: 9b bs 2 520.0 / 514.5 -> 562.0 / 556.3
 *                         tok/s (+8%), bs 3 633.8 / 625.9 -> 663.5 /
 *                         651.4; 35b-a3b bs 2 534.0 / 528.1 -> 552.8 /
 *                         550.5 (+4%), bs 3 692.7 / 684.4 -> 711.8 / 702.6.
 *   w8_ktile = 128 | 64   the i8 prefill GEMM's (mma_weights = i8,
 *                         cuda_w8.cu) k bytes a cp.async stage: 128 (the
 *                         default) halves the block barriers and waits of
 *                         64 (H200 prefill at 4096 tokens: 9b 17,679 vs
 *                         14,619 tok/s, 35b-a3b 19,543 vs 18,801; 152 KB of
 *                         shared memory at 4 stages, sm_90; sm_120's 99 KB
 *                         do not hold it: 64 there; w8_block = 32 keeps
 *                         64).  Same bits.
 *   w8_wgmma = true | false  the i8 prefill GEMM (mma_weights = i8,
 *                         w8_block = 128) on Hopper's warpgroup MMA
 *                         (cuda_w8wg.cu: wgmma.m64n128k32 from swizzled
 *                         shared memory) where the device is sm_90 and the
 *                         fatbin holds sm_90a code; elsewhere, or false,
 *                         the mma.sync kernel (cuda_w8.cu).  Same bits.
 *                         (H200: Q4_K 4096 x 4096 x 4096 577 vs 404 TOPS;
 *                         9b prefill 21,707 vs 17,602 tok/s at 4096.)
 *   w8_wg_pingpong = true | false  (with w8_wgmma) the two consumer
 *                         warpgroups take turns on the tensor cores each
 *                         k-tile, one folding its sums while the other
 *                         multiplies.  Same bits.  (H200: Q4_K GEMM
 *                         +3.6-5.2%, 9b prefill +2.4-2.9%, 35b flat.)
 *   gemv_prefetch = true | false  the dense GEMVs (v1, gemv_quad, f32)
 *                         ask the L2 for their weight rows before the
 *                         programmatic-launch wait (cu_prefetch_l2), so
 *                         they stream in while the kernel before drains;
 *                         false: no prefetch (A/B; same bits).
 *   gemv_fuse = true | false  consecutive MATMULs of one input on the v1
 *                         GEMV (decode: q/k/v, GDN qkv/z/beta/alpha, ffn
 *                         gate/up) as one launch (cu_mm.more), and an MOE's
 *                         expert gate+up likewise; same bits.
 *   fuse_norm = true | false  a residual ADD and the RMSNORM of its sum,
 *                         and the int8 copy of the norm's output that the
 *                         products after it read, as one kernel; same bits.
 *   norm = v2 | v1        RMSNORM rows of ne0 % 512 == 0 up to 4096, 16-byte
 *                         aligned (the hidden-size norms of both
 *                         families), plain and fused: v2 (default) on
 *                         cuda_elem.cu's rms2_kernel, a thread 16
 *                         consecutive elements, one barrier a row; v1 on
 *                         rmsnorm_kernel (256 threads, 3 barriers and a
 *                         32-step block sum by half the warps).  Another
 *                         summation order of the sum of squares: other
 *                         bits, both within the cpu's tolerance (fuse_norm's
 *                         forms agree bit for bit under either).
 *   attn_prefill = fa | split  ATTN ops over the f16 dense cache whose
 *                         tokens come in runs of >= 16 consecutive
 *                         positions on average (prefill): fa (default) runs
 *                         flash attention on the f16 tensor cores (64
 *                         tokens x 64 positions per step, q and the softmax
 *                         weights rounded to f16, f32 softmax and sums;
 *                         cuda_attn_fa.cu); split keeps the `attn` core
 *                         above for them.  Decode, f32 and i8 caches always
 *                         take `attn`.  Exact attention either way.
 *   attn_fa_tile = v1 | v2 | v3  (with attn_prefill = fa) v2: blocks of
 *                         128 tokens x 1 head, 8 warps, one block per SM,
 *                         the next K/V tile loading into a second stage
 *                         while the whole tile is computed (192 KB of
 *                         shared memory at head_dim 256: sm_90; sm_120
 *                         runs v1 at 256), and fewer context splits: each
 *                         K/V byte crosses the L2 half as often as in v1;
 *                         ops of <= 64 tokens keep v1.  v1: 64
 *                         tokens x 1 head, 4 warps, two blocks per SM.
 *                         The same bits where both cut the context into
 *                         the same splits, else within P's f16 rounding
 *                         (~2e-4 of max |out|, as either to the cpu; the
 *                         host emulation).  H200: 9b ATTN pre at a 32k
 *                         prompt 370 -> 297 ms, prefill +2.2% at 4096,
 *                         at a 32k prompt 22,822 vs 21,714 tok/s (9b),
 *                         22,776 vs 21,359 (35b-a3b).
 *                         v3 (the default; cuda_attn_fa3.cu): v2's tiles,
 *                         splits and
 *                         per-row arithmetic on Hopper's wgmma: a
 *                         producer warpgroup streams K/V through a
 *                         two-stage mbarrier ring, two consumer
 *                         warpgroups of 64 rows read each K/V tile from
 *                         shared memory once per 64 rows (v2: per 16), P V
 *                         with P from registers; head_dim 128 and 256, an
 *                         sm_90 with the fatbin's sm_90a code, else (and
 *                         where v2 would not run) v2's choice.  v2's
 *                         results up to the tensor cores' order of sums
 *                         (the same bits in the host emulation; on the
 *                         H200 within check_cuda_ops' 1e-3).  H200, same
 *                         binary, v3 vs v2 at a 32k prompt: 9b 24,997 vs
 *                         23,533 tok/s (ATTN pre 297 -> 201 ms), 35b-a3b
 *                         31,169 vs 27,882; at 4096 +0.5% / +0.9%, at 512
 *                         -1% (both).
 *   attn_fa3_overlap = true | false  (with attn_fa_tile = v3) true
 *                         (default): each consumer warpgroup issues
 *                         S = Q K^T of a tile, then P V of the tile
 *                         before, and runs the softmax while that P V is
 *                         on the tensor cores (K and V of the ring
 *                         released apart, so the producer stays a tile
 *                         ahead); false: v3 with every product waited
 *                         for.  Same per-row arithmetic and order: v3's
 *                         bits in the host emulation; H200, check_cuda_ops
 *                         attn_fa3 within 1e-3 of v3.  H200, same binary,
 *                         a 32k prompt: 9b 25,096 vs 24,977 tok/s
 *                         (+0.5%), 35b-a3b 31,101 vs 31,132 (-0.1%, noise).
 *   attn_split_blocks = 2 (1..32)  decode attention's split-K plan cuts
 *                         the context into enough chunks for about this
 *                         many blocks a multiprocessor (none shorter than
 *                         64 positions).  2 is what fits at once of the
 *                         f16 cache's tensor-core core at head_dim 256
 *                         (83 KB of shared memory a block): 4 made two
 *                         waves, each paying q's norm and rope and the
 *                         first tile's latency.  H200, same binary, bs 1:
 *                         ctx 32768 9b 323.2 tok/s (4: 311.3 / 310.7,
 *                         1: 305.6, 8: 304.9), 35b-a3b 322.8 (4: 308.1 /
 *                         308.4, 1: 314.1, 8: 301.8); ctx 4096 even.
 *   attn_split_len = context | bucket  what decode attention's split-K
 *                         cuts into its n_split chunks (the kernels,
 *                         split_chunk in cuda_attn.cuh): context (default)
 *                         each token's own context, read on the device, in
 *                         multiples of 64 positions; bucket the planned
 *                         max_len, the longest context rounded up by up to
 *                         1/8 (si_cu_attn_bucket, so a captured graph
 *                         serves the whole bucket), which left blocks idle:
 *                         at ctx 4096 (bucket 4608) the 9b's 4 kv heads x 24
 *                         splits of 192 positions made 96 blocks on 132
 *                         SMs, ~85 of them with positions; context gives 4 x
 *                         33 of 128.  context plans at most one wave
 *                         (n_split = SMs' blocks / blocks, rounded down).
 *                         Exact either way; another cut of the positions,
 *                         so another order of combine's sums.  H100, same
 *                         binary, alternated twice, tok/s context vs
 *                         bucket: 9b bs 8 ctx 32768 1,133.1 / 1,116.2 vs
 *                         1,033.7 / 1,041.3 (+8.6%), ctx 4096 1,464.7 /
 *                         1,487.8 vs 1,455.9 / 1,463.6; bs 1 within 2%
 *                         (4096 372.2 / 379.3 vs 378.7 / 380.2, 32768
 *                         344.5 / 352.9 vs 341.5 / 349.5); 35b-a3b bs 8
 *                         4096 1,297.8 / 1,294.4 vs 1,281.9 / 1,269.8,
 *                         32768 1,114.4 / 1,113.9 vs 1,143.0 / 1,127.6
 *                         (-1.9%: 32769 positions / 8 splits rounds up to
 *                         4,160 a split where the bucket's 9 x 4,096 left
 *                         a last split of one position), bs 1 even.
 *   gdn_prefill = chunked | seq  GDN runs of >= 32 tokens: chunked (default)
 *                         takes the delta rule in chunks of 64 tokens (one
 *                         block per v-head, sequence and 32 value columns;
 *                         the chunk's triangular system solved by forward
 *                         substitution, f32) after a conv with one thread
 *                         per (channel, token) (cuda_gdn_chunk.cu); seq runs
 *                         every token in order (cuda_gdn.cu), as decode and
 *                         shorter runs always do.  Same math, rounding
 *                         differs (~1e-6 relative).
 *   gdn_tc  = true | false  (with gdn_prefill = chunked) the chunks'
 *                         state-dependent products on the tf32 tensor cores
 *                         with the next chunk's inputs copied meanwhile
 *                         (cuda_gdn_tc.cu; operands rounded to 10 mantissa
 *                         bits, f32 sums and state; dk a multiple of 32 up
 *                         to 128, 200 KB of shared memory: sm_90, not
 *                         sm_120); false: the f32 kernel (A/B).
 *   gdn_dec = fused | split  GDN decode steps (every sequence one token):
 *                         split runs conv_kernel, rows_kernel,
 *                         norm_kernel and (unless fuse_gdn_q) the out
 *                         projection's quant_x, four launches; fused (default) runs
 *                         all of it as one launch of thread-block clusters
 *                         (sm_90+; cuda_gdn_rows.cu fused_kernel: a cluster
 *                         of up to 8 blocks per k-head and sequence owns
 *                         the state rows of the v-heads tiled onto it, the
 *                         gated norm's head sums through distributed shared
 *                         memory) and makes the int8 copy for the out
 *                         projection itself (as fuse_gdn_q, whatever that
 *                         knob says).  Same bits.  Shapes it does not take
 *                         (dk or dv not a multiple of 32, > 8 blocks of 32
 *                         rows a k-head, conv_k > 8) and runs of > 1 token
 *                         stay split.  H200, same binary, ctx 4096: 9b
 *                         339.5 vs 326.8 tok/s at bs 1 (733.6 vs 727.2 at
 *                         bs 8), 35b-a3b 350.1 vs 340.2 (1,049.8 vs
 *                         1,038.5).
 *   gdn_early = true | false  (gdn_dec = fused) true: each block loads its
 *                         state rows (16 KB) before the programmatic-launch
 *                         wait, overlapping that round trip with the drain
 *                         of the product before it (every input that
 *                         product writes is read after the wait).  Same
 *                         bits; false: after the wait (A/B).  Off until
 *                         stop 47 (H200, older chain: 9b 340.9 vs 340.6
 *                         tok/s, 35b-a3b 346.4 vs 346.0, noise).  Stop 47,
 *                         H100, ctx 4096 bs 1, same binary, alternated,
 *                         with moe_persist on: 35b-a3b 389.8 / 389.9 vs
 *                         384.7 / 385.5 tok/s (+1.2%), 9b 385.9 / 385.9
 *                         vs 382.8 / 382.6 (+0.8%), each arm's range
 *                         within 1%: on.
 *   graph   = true | false  true (default): an exec whose op list (kinds,
 *                         tensors, parameters, batch shape) was seen before
 *                         runs as one CUDA graph launch, captured the
 *                         second time the list is seen; each replay only
 *                         re-stages positions/sequence runs and advances
 *                         the KV lengths (cuda_graph.c).  The attention
 *                         grid is sized for max_len rounded up to 256
 *                         (both settings), so decoding recaptures every
 *                         256 positions.  Lists with an op taken by a
 *                         kernel plugin, and any list whose capture
 *                         fails, run op by op.  false: always op by op.
 *                         profile = true turns graphs off.
 *   profile = false | true | graph  true: device time per kind of op,
 *                         logged at close (cuda_prof.c); forces graph =
 *                         false.  graph: graphs stay on and each replay's
 *                         device time is taken with events, logged at
 *                         close per op-list length (cuda_graph.c): set
 *                         against a step's wall time it says how much of
 *                         the step the host and the syncs take.
 *   profile_twice = false | norm | matmul | glu | moe | empty  (for measurement,
 *                         with graph) each captured unit of that class
 *                         runs twice in the graph: the fused ADD+RMSNORM
 *                         (norm), the products and groups of products
 *                         (matmul: MATMUL, gemv_fuse's groups), the dense
 *                         gate/up + SwiGLU (glu), the MOE (moe).  Each is
 *                         idempotent (it rewrites what it wrote), so the
 *                         outputs do not change; the graph's device time
 *                         less the plain one (profile = graph), over the
 *                         units doubled (logged at capture), is a unit's
 *                         cost inside the chain of dependent launches,
 *                         which ncu's times of kernels alone do not show
 *                         (programmatic launch overlaps each with the one
 *                         before).  The repeat finds the int8 copy of x
 *                         as the first run left it: a MOE or glu repeat
 *                         quantises its input again (one launch more).
 *                         Not GDN or ATTN (state, KV lengths).  empty:
 *                         every captured unit is followed by a launch of a
 *                         kernel that only waits for the one before it
 *                         (si_cu_empty): the cost of a bare link.
 *
 * Exec enqueues without host round trips: per-op host data goes through a
 * pinned staging arena, GET_ROWS checks its ids on the device and the
 * first bad id is reported as SI_ERANGE by the next sync() or download().
 *
 * Weights are uploaded as-is in their GGUF type; the kernels decode
 * F32/F16/BF16/Q8_0/Q4_K/Q5_K/Q6_K in registers (cuda_quant.cuh).  Every
 * op of one exec is enqueued on one stream; sync waits for it.  The KV
 * cache (cuda_kv.c) is a dense device array per layer
 * ([seq][ctx][kv_head][head_dim]) or, with kv_type = i8, a paged int8
 * pool per layer.
 *
 * Kernel plugins ([kernel.NAME] with backend = "cuda_sm120") replace one op
 * kind each where their supports() says so (cuda_kernels.c; the contract
 * they build against is include/sparkinfer/cuda_ext.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "../common/si_kvknob.h"
#include "cuda_internal.h"

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

static int cuda_post_ids(si_backend *b, const int32_t *ids, uint32_t n, si_err *err);

static void cuda_close(si_backend *b)
{
    if (b == NULL)
        return;
    /* HOST_IDS ops still waiting are let go (zeros) rather than waited out */
    static const int32_t zeros[SI_SUBMIT_MAX_ROWS];
    while (b->post_ring != NULL && b->post_given < b->post_queued) {
        si_err scratch = { { 0 } };
        cuda_post_ids(b, zeros, 1, &scratch);
    }
    if (b->stream != NULL)
        cudaStreamSynchronize(b->stream);
    cu_pm_prof_log(b);
    cu_kernels_fini(b);
    cu_prof_close(b);
    cu_graph_close(b);
    if (b->stream != NULL)
        cudaStreamDestroy(b->stream);
    if (b->side != NULL)
        cudaStreamDestroy(b->side);
    if (b->ev_fork != NULL)
        cudaEventDestroy(b->ev_fork);
    if (b->ev_join != NULL)
        cudaEventDestroy(b->ev_join);
    cudaFree(b->ws);
    cudaFree(b->up_dev);
    cu_upbuf_free(&b->up);
    free(b->up_off);
    cudaFree(b->xq);
    cudaFree(b->w8);
    cu_wcache_free(&b->w8c);
    cu_wcache_free(&b->rg);
    cudaFree(b->attn_part);
    cudaFree(b->flag_dev);
    cudaFree(b->route_ctr);
    cudaFree(b->norm_ctr);
    cudaFree(b->dn_part);
    cudaFree(b->moe_ctr);
    cudaFree(b->pm_bar);
    cudaFree(b->pm_prof);
    cudaFreeHost(b->flag_host);
    cudaFreeHost(b->dl_pin);
    cudaFreeHost(b->post_ring);
    cudaFree(b->post_ctr);
    for (int i = 0; i < SI_DOWNLOADS_IN_FLIGHT; i++)
        if (b->dl[i].ev != NULL)
            cudaEventDestroy(b->dl[i].ev);
    cudaFreeHost(b->pin);
    if (b->pin_ev != NULL)
        cudaEventDestroy(b->pin_ev);
    free(b);
}

/* Integer knob key of section into *out when set (else *out stays): a
 * whole decimal number in lo..hi, or SI_EINVAL naming key, value and
 * what was expected (what: "a page count"). */
static int knob_int(const si_host *h, const char *section, const char *key, const char *what, long long lo,
                    long long hi, long long *out, si_err *err)
{
    const char *v = h->cfg_get(h, section, key);
    if (v == NULL)
        return SI_OK;
    char *end = NULL;
    errno = 0;
    const long long n = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || n < lo || n > hi)
        return si_err_set(err, SI_EINVAL, "[%s] %s = '%s': expected %s in %lld..%lld", section, key, v, what, lo, hi);
    *out = n;
    return SI_OK;
}

/* Knob key of section, one of the n values vals[] when set: *out becomes
 * its index (else *out stays), or SI_EINVAL listing them. */
static int knob_pick(const si_host *h, const char *section, const char *key, const char *const *vals, int n,
                     int *out, si_err *err)
{
    const char *v = h->cfg_get(h, section, key);
    if (v == NULL)
        return SI_OK;
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(v, vals[i]) == 0) {
            *out = i;
            return SI_OK;
        }
        const size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i ? "|" : "", vals[i]);
    }
    return si_err_set(err, SI_EINVAL, "[%s] %s = '%s': expected one of %s", section, key, v, list);
}

static int cuda_open(const si_host *h, const char *section, si_backend **out, si_err *err)
{
    if (h == NULL || out == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": open: NULL argument");
    if (!SI_HAS_MEMBER(h, si_host, quant) || h->log == NULL || h->cfg_get == NULL || h->type_name == NULL)
        return si_err_set(err, SI_EABI, CU_NAME ": open: host table of %u bytes lacks services of ABI 1.0", h->size);
    if (section == NULL)
        section = "backend." CU_NAME;
    long long dev = 0, kv_pages = 0;   /* kv_pages 0: n_seq x ceil(n_ctx / 16), see cuda_kv.c */
    int rc = knob_int(h, section, "device", "a device index", 0, 64, &dev, err);
    if (rc != SI_OK)
        return rc;
    const int device = (int)dev;
    /* (default i8: the issue's paged int8 cache; f16 is the fidelity arm) */
    static const si_kvknob kvk = { CU_NAME, SI_TYPE_I8, SI_TYPE_F16, true, true };
    uint32_t kv_type;
    int krc = si_kvknob_resolve(h, section, &kvk, &kv_type, err);
    if (krc != SI_OK)
        return krc;
    if ((rc = knob_int(h, section, "kv_pages", "a page count", 1, 0x7fffffff, &kv_pages, err)) != SI_OK)
        return rc;
    if (kv_pages != 0 && kv_type != SI_TYPE_I8)
        h->log(h, SI_LOG_WARN, CU_NAME, "[%s] kv_pages = %lld has no effect: only kv_type = i8 is paged", section,
               kv_pages);
    /* Two-way knobs: key, the value meaning true, the one meaning false,
     * the default (the header comment says what each does). */
    bool dp4a = true, gemv_v2 = false, prefill_mma = true, mma_v2 = true, attn_split = true, attn_fa = true, attn_gqa = true, attn_mma = true,
         gdn_chunked = true, gdn_rows = true, gdn_tc = true;
    bool graph = true, gemv_fuse = true, fuse_norm = true, mma_w8 = true, w8_128 = true, w8_cache = true, pdl = true,
         f32_tiled = true, gemv_quad = true, gemv_qe = true, gemv_qn = true, gemv_mma = true, gemv_mma_wide = true, gemv_wide_db = false, gemv_wide_split = false, gemv_ring_ks8 = true, gemv_rg_cols = true, expert_early = true, gemv_prefetch = true, kt128 = true, w8_wg = true, w8_pp = true, gemv_xs = true, gemv_st = true,
         gemv_w8 = true, fuse_gdn = false, fuse_attn = true,
         attn_fa3_ov = true;
    bool gdn_dec = true, gdn_early = true, norm_v2 = true, gemv_glu = true;
    bool moe_dec_fuse = false, moe_dec_fuse_gu = true, moe_sdc = true, gemv_q6r = true, gemv_q8r = true;
    bool moe_persist = true, moe_persist_prof = false;
    bool upload_staged = true, h2d_early = true, download_pinned = true, host_ids = true;
    int moe_ovl = 2;           /* moe_overlap = false | true | batch: 0, 1, 2 */
    int route_fused = 2;       /* route_fused = false | true | batch: 0, 1, 2 */
    int norm_tail = 0;         /* norm_tail = false | true | one | defer: 0, 1, 2, 3 */
    int fa_tile_i = 2;         /* attn_fa_tile = v1 | v2 | v3: index 0, 1, 2 */
    int ring_i = 1;            /* attn_ring = false | true | small: 0, 1, 2 */
    int ring_pages_i = 1;      /* attn_ring_pages = each | ahead: 0, 1 */
    int ring_chains_i = 1;     /* attn_ring_chains = 1 | 2: index 0, 1 */
    int wide_regs = 2;         /* gemv_wide_regs = capped | small | full: 0, 1, 2 */
    int wide_ring = 2;         /* gemv_wide_ring = false | true | kquant: 0, 1, 2 */
    int narrow = 2;            /* gemv_narrow = gm | wide | kquant: 0, 1, 2 */
    int gemv_st6 = 2;          /* gemv_staged_q6 = false | true | large: 0, 1, 2 */
    int prof_i = 0;            /* profile = false | true | graph: 0, 1, 2 */
    int twice_i = 0;           /* profile_twice = false | norm | matmul | glu | moe | empty: enum cu_twice */
    long long split_bps = 2;   /* attn_split_blocks = 1..32 */
    bool split_ctx = true;     /* attn_split_len = context | bucket */
    long long mma_cols = 4;    /* gemv_mma_cols = 2..8 */
    long long block_cols = 4;  /* mm_block_cols = 2..9 */
    const struct {
        const char *key, *yes, *no;
        bool       *out;
    } two[] = {
        { "matmul", "dp4a", "f32", &dp4a },
        { "gemv", "v2", "v1", &gemv_v2 },   /* default v1: see above */
        { "gemv_fuse", "true", "false", &gemv_fuse },
        { "gemv_quad", "true", "false", &gemv_quad },
        { "gemv_quad_experts", "true", "false", &gemv_qe },
        { "gemv_quad_cols", "true", "false", &gemv_qn },
        { "gemv_mma", "true", "false", &gemv_mma },
        { "gemv_mma_wide", "true", "false", &gemv_mma_wide },
        { "gemv_wide_db", "true", "false", &gemv_wide_db },
        { "gemv_wide_split", "true", "false", &gemv_wide_split },
        { "gemv_wide_ring_ks8", "true", "false", &gemv_ring_ks8 },
        { "expert_early", "true", "false", &expert_early },
        { "moe_dec_fuse", "true", "false", &moe_dec_fuse },
        { "moe_dec_fuse_gu", "true", "false", &moe_dec_fuse_gu },
        { "moe_sdc", "true", "false", &moe_sdc },
        { "moe_persist", "true", "false", &moe_persist },
        { "moe_persist_prof", "true", "false", &moe_persist_prof },
        { "gemv_q6r", "true", "false", &gemv_q6r },
        { "gemv_q8r", "true", "false", &gemv_q8r },
        { "gemv_regroup_cols", "true", "false", &gemv_rg_cols },
        { "upload_staged", "true", "false", &upload_staged },
        { "download_pinned", "true", "false", &download_pinned },
        { "host_ids", "true", "false", &host_ids },
        { "h2d_early", "true", "false", &h2d_early },
        { "gemv_xsmem", "true", "false", &gemv_xs },
        { "gemv_warps", "8", "4", &gemv_w8 },
        { "gemv_staged", "true", "false", &gemv_st },
        { "gemv_prefetch", "true", "false", &gemv_prefetch },
        { "fuse_norm", "true", "false", &fuse_norm },
        { "norm", "v2", "v1", &norm_v2 },
        { "fuse_gdn_q", "true", "false", &fuse_gdn },
        { "fuse_attn_q", "true", "false", &fuse_attn },
        { "gemv_glu", "true", "false", &gemv_glu },
        { "prefill_mm", "mma", "gemv", &prefill_mma },
        { "mma_tile", "v2", "v1", &mma_v2 },
        { "mma_weights", "i8", "gguf", &mma_w8 },
        { "w8_block", "128", "32", &w8_128 },
        { "w8_cache", "true", "false", &w8_cache },
        { "w8_ktile", "128", "64", &kt128 },
        { "w8_wgmma", "true", "false", &w8_wg },
        { "w8_wg_pingpong", "true", "false", &w8_pp },
        { "pdl", "true", "false", &pdl },
        { "f32_gemm", "tiled", "gemv", &f32_tiled },
        { "attn", "split", "simple", &attn_split },
        { "attn_prefill", "fa", "split", &attn_fa },
        { "attn_gqa", "shared", "per_head", &attn_gqa },
        { "attn_mma", "true", "false", &attn_mma },
        { "attn_fa3_overlap", "true", "false", &attn_fa3_ov },
        { "attn_split_len", "context", "bucket", &split_ctx },
        { "gdn_prefill", "chunked", "seq", &gdn_chunked },
        { "gdn_rows", "true", "false", &gdn_rows },
        { "gdn_tc", "true", "false", &gdn_tc },
        { "gdn_dec", "fused", "split", &gdn_dec },
        { "gdn_early", "true", "false", &gdn_early },
        { "graph", "true", "false", &graph },
    };
    for (size_t i = 0; i < sizeof two / sizeof two[0]; i++) {
        const char *v = h->cfg_get(h, section, two[i].key);
        if (v == NULL)
            continue;
        if (strcmp(v, two[i].yes) != 0 && strcmp(v, two[i].no) != 0)
            return si_err_set(err, SI_EINVAL, "[%s] %s = '%s': expected one of %s|%s", section, two[i].key, v,
                              two[i].yes, two[i].no);
        *two[i].out = strcmp(v, two[i].yes) == 0;
    }
    static const char *const fa_tiles[] = { "v1", "v2", "v3" }, *const st6s[] = { "false", "true", "large" },
                             *const profs[] = { "false", "true", "graph" },
                             *const rings[] = { "false", "true", "small" },
                             *const ring_pages[] = { "each", "ahead" }, *const chains[] = { "1", "2" },
                             *const wregs[] = { "capped", "small", "full" },
                             *const wrings[] = { "false", "true", "kquant" },
                             *const narrows[] = { "gm", "wide", "kquant" },
                             *const batches[] = { "false", "true", "batch" },
                             *const ntails[] = { "false", "true", "one", "defer" },
                             *const twices[] = { "false", "norm", "matmul", "glu", "moe", "empty" };
    if ((rc = knob_pick(h, section, "attn_fa_tile", fa_tiles, 3, &fa_tile_i, err)) != SI_OK ||
        (rc = knob_pick(h, section, "profile", profs, 3, &prof_i, err)) != SI_OK ||
        (rc = knob_pick(h, section, "attn_ring", rings, 3, &ring_i, err)) != SI_OK ||
        (rc = knob_pick(h, section, "attn_ring_pages", ring_pages, 2, &ring_pages_i, err)) != SI_OK ||
        (rc = knob_pick(h, section, "attn_ring_chains", chains, 2, &ring_chains_i, err)) != SI_OK ||
        (rc = knob_pick(h, section, "gemv_wide_regs", wregs, 3, &wide_regs, err)) != SI_OK ||
        (rc = knob_pick(h, section, "gemv_wide_ring", wrings, 3, &wide_ring, err)) != SI_OK ||
        (rc = knob_pick(h, section, "gemv_narrow", narrows, 3, &narrow, err)) != SI_OK ||
        (rc = knob_pick(h, section, "gemv_staged_q6", st6s, 3, &gemv_st6, err)) != SI_OK ||
        (rc = knob_pick(h, section, "moe_overlap", batches, 3, &moe_ovl, err)) != SI_OK ||
        (rc = knob_pick(h, section, "route_fused", batches, 3, &route_fused, err)) != SI_OK ||
        (rc = knob_pick(h, section, "norm_tail", ntails, 4, &norm_tail, err)) != SI_OK ||
        (rc = knob_pick(h, section, "profile_twice", twices, 6, &twice_i, err)) != SI_OK ||
        (rc = knob_int(h, section, "attn_split_blocks", "a block count", 1, 32, &split_bps, err)) != SI_OK ||
        (rc = knob_int(h, section, "gemv_mma_cols", "a column count", 2, 8, &mma_cols, err)) != SI_OK ||
        (rc = knob_int(h, section, "mm_block_cols", "a column count", 2, 9, &block_cols, err)) != SI_OK)
        return rc;
    const bool profile = prof_i == 1;
    if (twice_i != CU_TWICE_OFF && (!graph || profile))
        h->log(h, SI_LOG_WARN, CU_NAME, "[%s] profile_twice has no effect: it doubles units in captured graphs (graph = "
               "false or profile = true runs none)", section);
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
    rc = si_cuda_selftest_launch(probe_buf, 256);
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
    cu_opcheck_init(b);
    b->device = device;
    b->kv_type = kv_type;
    b->kv_pages = (uint32_t)kv_pages;
    b->mm_dp4a = dp4a;
    b->mm_prefill_mma = prefill_mma;
    b->gemv_v2 = gemv_v2;
    b->gemv_fuse = gemv_fuse;
    b->fuse_norm = fuse_norm;
    b->norm_v2 = norm_v2;
    b->norm_tail = norm_tail;
    b->fuse_gdn_q = fuse_gdn;
    b->fuse_attn_q = fuse_attn;
    b->mm_mma_v2 = mma_v2;
    b->mm_w8 = mma_w8;
    b->f32_tiled = f32_tiled;
    b->gemv_quad = gemv_quad;
    b->gemv_qe = gemv_qe;
    b->gemv_qn = gemv_qn;
    b->gemv_mma = gemv_mma;
    b->gemv_mma_wide = gemv_mma_wide;
    b->gemv_wide_db = gemv_wide_db;
    b->gemv_wide_regs = wide_regs;
    b->gemv_wide_split = gemv_wide_split;
    b->gemv_wide_ring = wide_ring;
    b->gemv_ring_ks8 = gemv_ring_ks8;
    b->gemv_narrow = narrow;
    b->gemv_rg_cols = gemv_rg_cols;
    b->expert_early = expert_early;
    b->route_fused = route_fused;
    b->moe_dec_fuse = moe_dec_fuse;
    b->moe_dec_fuse_gu = moe_dec_fuse_gu;
    b->moe_sdc = moe_sdc;
    b->moe_persist = moe_persist;
    b->gemv_q6r = gemv_q6r;
    b->gemv_q8r = gemv_q8r;
    b->upload_staged = upload_staged;
    b->download_pinned = download_pinned;
    b->h2d_early = h2d_early;
    b->mm_block_cols = (int)block_cols;
    b->prof_twice = twice_i;
    b->gemv_xs = gemv_xs;
    b->gemv_warps = gemv_w8 ? 8 : 4;
    b->gemv_st = gemv_st;
    b->gemv_st6 = gemv_st6;
    b->gemv_prefetch = gemv_prefetch;
    b->w8_ktile = kt128 ? 128 : 64;
    b->w8_wgmma = w8_wg;
    b->w8_wg_pp = w8_pp;
    b->w8_block = w8_128 ? 128 : 32;
    b->w8_cache_on = w8_cache;
    b->pdl = pdl;
    b->attn_split = attn_split;
    b->attn_fa = attn_fa;
    b->attn_fa_tile = fa_tile_i + 1;
    b->attn_fa3_ov = attn_fa3_ov;
    b->attn_gqa = attn_gqa;
    b->attn_mma = attn_mma;
    b->attn_ring = ring_i;
    b->attn_ring_ahead = ring_pages_i == 1;
    b->attn_ring_chains = ring_chains_i + 1;
    b->gdn_rows = gdn_rows;
    b->gdn_chunked = gdn_chunked;
    b->gdn_tc = gdn_tc;
    int clusters = 0;   /* (gdn_dec = fused launches thread-block clusters) */
    if (gdn_dec && (cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, device) != cudaSuccess || !clusters)) {
        cudaGetLastError();
        h->log(h, SI_LOG_WARN, CU_NAME, "gdn_dec = fused: device %d has no cluster launch; using split", device);
    }
    b->gdn_fused = gdn_dec && clusters;
    b->gdn_early = gdn_early;
    b->gemv_glu = gemv_glu;
    b->n_sm = p.multiProcessorCount;
    b->attn_split_bps = (int)split_bps;
    b->attn_split_ctx = split_ctx;
    b->gemv_mma_cols = (int)mma_cols;
    snprintf(b->device_name, sizeof b->device_name, "%s", p.name);
    if ((e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        b->stream = NULL;
        cuda_close(b);
        return si_err_set(err, SI_EDEVICE, "cudaStreamCreate: %s", cudaGetErrorString(e));
    }
    if (moe_ovl > 0 && (cudaStreamCreateWithFlags(&b->side, cudaStreamNonBlocking) != cudaSuccess ||
                        cudaEventCreateWithFlags(&b->ev_fork, cudaEventDisableTiming) != cudaSuccess ||
                        cudaEventCreateWithFlags(&b->ev_join, cudaEventDisableTiming) != cudaSuccess)) {
        /* (the MOE then runs its shared expert in line: same bits) */
        h->log(h, SI_LOG_WARN, CU_NAME, "moe_overlap: no second stream or events (%s); running in line",
               cudaGetErrorString(cudaGetLastError()));
        moe_ovl = 0;
    }
    b->moe_overlap = b->side != NULL && b->ev_fork != NULL && b->ev_join != NULL ? moe_ovl : 0;
    cu_kernels_init(b, p.major, p.minor);
    if (b->attn_mma && (e = (cudaError_t)si_cu_attn_mma_init()) != cudaSuccess) {
        /* (the kernel is then never picked: attn_gqa's core runs) */
        b->host->log(b->host, SI_LOG_WARN, CU_NAME, "attn_mma: %s; using the attn_gqa core", cudaGetErrorString(e));
        cudaGetLastError();
        b->attn_mma = false;
    }
    if (b->attn_ring > 0 &&
        ((e = cudaDeviceGetAttribute(&b->smem_blk, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) != cudaSuccess ||
         (e = cudaDeviceGetAttribute(&b->smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device)) != cudaSuccess ||
         (e = (cudaError_t)si_cu_attn_ring_init(b->smem_blk)) != cudaSuccess)) {
        /* (split_mma_kernel / split_i8_kernel then run: the same results within f16 rounding) */
        b->host->log(b->host, SI_LOG_WARN, CU_NAME, "attn_ring: %s; using the other split cores", cudaGetErrorString(e));
        cudaGetLastError();
        b->attn_ring = 0;
    }
    bool wg_avail = false;
    if (b->w8_wgmma && (e = (cudaError_t)si_cu_w8wg_init(&wg_avail)) != cudaSuccess) {
        b->host->log(b->host, SI_LOG_WARN, CU_NAME, "w8_wgmma: %s; using the mma.sync GEMM", cudaGetErrorString(e));
        cudaGetLastError();
    }
    b->w8_wgmma = b->w8_wgmma && wg_avail;   /* (silently off where the device or fatbin has no wgmma) */
    bool fa3_avail = false;
    if (b->attn_fa_tile == 3 && (e = (cudaError_t)si_cu_fa3_init(&fa3_avail)) != cudaSuccess) {
        b->host->log(b->host, SI_LOG_WARN, CU_NAME, "attn_fa_tile = v3: %s; using v2", cudaGetErrorString(e));
        cudaGetLastError();
    }
    if (b->attn_fa_tile == 3 && !fa3_avail) {
        if (e == cudaSuccess)
            b->host->log(b->host, SI_LOG_INFO, CU_NAME, "attn_fa_tile = v3 needs an sm_90 running sm_90a code; using v2");
        b->attn_fa_tile = 2;
    }
    if (profile && (rc = cu_prof_open(b, err)) != SI_OK) {
        cuda_close(b);
        return rc;
    }
    /* profile times op by op: a graph would hide the ops from it. */
    if (graph && !profile && (rc = cu_graph_open(b, prof_i == 2, err)) != SI_OK) {
        cuda_close(b);
        return rc;
    }
    if ((e = cudaEventCreateWithFlags(&b->pin_ev, cudaEventDisableTiming)) != cudaSuccess) {
        b->pin_ev = NULL;
        cuda_close(b);
        return si_err_set(err, SI_EDEVICE, "cudaEventCreate: %s", cudaGetErrorString(e));
    }
    if ((e = cudaMalloc((void **)&b->flag_dev, 4 * sizeof(unsigned))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&b->flag_host, 4 * sizeof(unsigned))) != cudaSuccess ||
        (e = cudaMemset(b->flag_dev, 0, 4 * sizeof(unsigned))) != cudaSuccess) {
        cudaGetLastError();
        cuda_close(b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": error flag: %s", cudaGetErrorString(e));
    }
    memset(b->flag_host, 0, 4 * sizeof(unsigned));
    /* HOST_IDS's posts (knob host_ids): without mapped memory the op is
     * not offered */
    if (host_ids && (cudaHostAlloc((void **)&b->post_ring, CU_POST_RING * sizeof(cu_post_slot),
                                   cudaHostAllocMapped) != cudaSuccess ||
                     cudaHostGetDevicePointer((void **)&b->post_ring_dev, b->post_ring, 0) != cudaSuccess ||
                     cudaMalloc((void **)&b->post_ctr, sizeof(unsigned)) != cudaSuccess ||
                     cudaMemset(b->post_ctr, 0, sizeof(unsigned)) != cudaSuccess)) {
        cudaGetLastError();
        h->log(h, SI_LOG_WARN, CU_NAME, "[%s] host_ids: no mapped memory: sampled steps run at their post", section);
        cudaFreeHost(b->post_ring);
        cudaFree(b->post_ctr);
        b->post_ring = NULL;
        b->post_ctr = NULL;
    } else if (host_ids) {
        memset(b->post_ring, 0, CU_POST_RING * sizeof(cu_post_slot));
    }
    /* (route_fused's count of finished blocks: zero between launches,
     * each launch's last block puts it back, so graphs replay it as is) */
    if (b->route_fused && ((e = cudaMalloc((void **)&b->route_ctr, sizeof(unsigned))) != cudaSuccess ||
                           (e = cudaMemset(b->route_ctr, 0, sizeof(unsigned))) != cudaSuccess)) {
        cudaGetLastError();
        cuda_close(b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": route_fused counter: %s", cudaGetErrorString(e));
    }
    /* (norm_tail's count, as route_ctr's) */
    /* (norm_tail = defer's two arrays of block sums: written before read) */
    if (b->norm_tail == 3 && (e = cudaMalloc((void **)&b->dn_part, 2 * CU_DN_PART * sizeof(double))) != cudaSuccess) {
        cudaGetLastError();
        cuda_close(b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": norm_tail = defer sums: %s", cudaGetErrorString(e));
    }
    if (b->norm_tail > 0 && b->norm_tail < 3 &&
        ((e = cudaMalloc((void **)&b->norm_ctr, sizeof(unsigned))) != cudaSuccess ||
                             (e = cudaMemset(b->norm_ctr, 0, sizeof(unsigned))) != cudaSuccess)) {
        cudaGetLastError();
        cuda_close(b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": norm_tail counter: %s", cudaGetErrorString(e));
    }
    /* (moe_dec_fuse's counts, CU_MOE_CTR for the gate/up's groups then as
     * many for the down's: zero between launches as route_ctr) */
    const size_t moe_ctr_bytes = 2 * CU_MOE_CTR * sizeof(unsigned);
    if (b->moe_dec_fuse && ((e = cudaMalloc((void **)&b->moe_ctr, moe_ctr_bytes)) != cudaSuccess ||
                            (e = cudaMemset(b->moe_ctr, 0, moe_ctr_bytes)) != cudaSuccess)) {
        cudaGetLastError();
        cuda_close(b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": moe_dec_fuse counters: %s", cudaGetErrorString(e));
    }
    /* (moe_persist's barrier word: its launches leave it as they find it) */
    if (b->moe_persist && ((e = cudaMalloc((void **)&b->pm_bar, sizeof(unsigned))) != cudaSuccess ||
                           (e = cudaMemset(b->pm_bar, 0, sizeof(unsigned))) != cudaSuccess)) {
        cudaGetLastError();
        cuda_close(b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": moe_persist barrier: %s", cudaGetErrorString(e));
    }
    if (b->moe_persist && moe_persist_prof &&
        ((e = cudaMalloc((void **)&b->pm_prof, CU_PM_PROF_N * sizeof *b->pm_prof)) != cudaSuccess ||
         (e = cudaMemset(b->pm_prof, 0, CU_PM_PROF_N * sizeof *b->pm_prof)) != cudaSuccess)) {
        cudaGetLastError();
        cuda_close(b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": moe_persist_prof counters: %s", cudaGetErrorString(e));
    }
    h->log(h, SI_LOG_INFO, CU_NAME,
           "device %d: %s, sm_%d%d, %.1f GiB, kv %s, matmul %s, gemv %s%s, prefill_mm %s%s, attn %s, attn_prefill %s, "
           "attn_gqa %s, attn_ring %s, gdn_rows %s, gdn_prefill %s, graph %s",
           device, p.name, p.major, p.minor, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
           kv_type == SI_TYPE_F16 ? "f16" : kv_type == SI_TYPE_I8 ? "i8 paged" : "f32", dp4a ? "dp4a" : "f32",
           gemv_v2 ? "v2" : "v1", !gemv_v2 && gemv_fuse ? " (fused)" : "", prefill_mma ? "mma" : "gemv", prefill_mma ? (mma_v2 ? " (v2)" : " (v1)") : "",
           attn_split ? "split" : "simple", attn_fa ? "fa" : "split", attn_gqa ? "shared" : "per_head",
           b->attn_ring == 1 ? "true" : b->attn_ring == 2 ? "small" : "false", gdn_rows ? "true" : "false",
           gdn_chunked ? "chunked" : "seq", b->graphs != NULL ? "true" : profile && graph ? "false (profile)" : "false");
    *out = b;
    return SI_OK;
}

void *cu_ws_reserve(si_backend *b, size_t bytes, si_err *err)
{
    if (bytes <= b->ws_size)
        return b->ws;
    if (b->capturing) {   /* no sync while a graph is captured: run op by op */
        b->cap_grow = true;
        si_err_set(err, SI_ENOMEM, CU_NAME ": workspace growth during graph capture");
        return NULL;
    }
    b->ws_gen++;
    /* Kernels of earlier ops may still read the old workspace. */
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) {
        si_err_set(err, SI_EDEVICE, CU_NAME ": %s", cudaGetErrorString(e));
        return NULL;
    }
    cudaFree(b->ws);
    b->ws = NULL;
    b->ws_size = 0;
    size_t want = bytes + bytes / 2;
    if ((e = cudaMalloc(&b->ws, want)) != cudaSuccess) {
        cudaGetLastError();   /* clear the sticky-free allocation error */
        if ((e = cudaMalloc(&b->ws, bytes)) != cudaSuccess) {
            cudaGetLastError();
            b->ws = NULL;
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            si_err_set(err, SI_ENOMEM, CU_NAME ": workspace of %zu bytes does not fit (%zu free): %s", bytes,
                       free_b, cudaGetErrorString(e));
            return NULL;
        }
        want = bytes;
    }
    b->ws_size = want;
    return b->ws;
}

void *cu_pin_reserve(si_backend *b, size_t bytes, si_err *err)
{
    size_t need = (bytes + 15) & ~(size_t)15;
    if (b->capturing) {   /* the ops' own uploads use the graph's staging */
        si_err_set(err, SI_EINVAL, CU_NAME ": shared pinned staging used during graph capture");
        return NULL;
    }
    if (need > b->pin_cap - b->pin_used || b->pin == NULL) {
        /* Earlier copies of this exec may still read the arena. */
        cudaError_t e = cudaStreamSynchronize(b->stream);
        if (e != cudaSuccess) {
            si_err_set(err, SI_EDEVICE, CU_NAME ": %s", cudaGetErrorString(e));
            return NULL;
        }
        b->pin_used = 0;
        if (need > b->pin_cap || b->pin == NULL) {
            cudaFreeHost(b->pin);
            b->pin = NULL;
            b->pin_cap = 0;
            size_t want = need < ((size_t)1 << 20) ? (size_t)1 << 20 : need + need / 2;
            if ((e = cudaMallocHost((void **)&b->pin, want)) != cudaSuccess) {
                cudaGetLastError();
                b->pin = NULL;
                si_err_set(err, SI_ENOMEM, CU_NAME ": %zu bytes of pinned staging: %s", want, cudaGetErrorString(e));
                return NULL;
            }
            b->pin_cap = want;
        }
    }
    void *p = b->pin + b->pin_used;
    b->pin_used += need;
    return p;
}

/* (cuda_backend.h) */
int cu_scratch_grow(si_backend *b, uint8_t **p, size_t *cap, size_t bytes, const char *what, si_err *err)
{
    if (b->capturing) {
        b->cap_grow = true;
        return si_err_set(err, SI_ENOMEM, CU_NAME ": scratch growth during graph capture");
    }
    b->ws_gen++;
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, CU_NAME ": %s", cudaGetErrorString(e));
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    const size_t want = ((bytes + bytes / 2) + 255) & ~(size_t)255;
    if ((e = cudaMalloc((void **)p, want)) != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        return si_err_set(err, SI_ENOMEM, CU_NAME ": %zu bytes for %s: %s", want, what, cudaGetErrorString(e));
    }
    *cap = want;
    return SI_OK;
}

int cu_xq_reserve(si_backend *b, size_t bytes, si_err *err)
{
    if (bytes <= b->xq_cap && b->xq != NULL)
        return SI_OK;
    b->xq_key = NULL;
    /* two halves (see xq in cuda_backend.h): the buffer is 2 * xq_cap */
    size_t cap2 = 0;
    int rc = cu_scratch_grow(b, &b->xq, &cap2, 2 * bytes, "quantised activations", err);
    b->xq_cap = cap2 / 2;
    return rc;
}

int cu_w8_reserve(si_backend *b, size_t bytes, si_err *err)
{
    if (bytes <= b->w8_cap && b->w8 != NULL)
        return SI_OK;
    return cu_scratch_grow(b, &b->w8, &b->w8_cap, bytes, "int8 weights (mma_weights = i8)", err);
}

int cu_attn_prepare(si_backend *b, cu_attn *a, const int32_t *pos, si_err *err)
{
    int32_t max_len = 0;
    int64_t runs = 0;   /* runs of consecutive positions (a new sequence, or one token of each when decoding) */
    for (int64_t t = 0; t < a->n; t++) {
        if (pos[t] >= max_len)
            max_len = pos[t] + 1;   /* pos < n_ctx: checked by the caller */
        if (t == 0 || pos[t] != pos[t - 1] + 1)
            runs++;
    }
    a->split = b->attn_split;
    a->gqa_shared = b->attn_gqa;
    a->dec_mma = b->attn_mma;
    a->ring = b->attn_ring;
    a->ring_ahead = b->attn_ring_ahead;
    a->ring_chains = b->attn_ring_chains;
    a->smem_blk = b->smem_blk;
    a->smem_sm = b->smem_sm;
    a->fa = b->attn_fa && a->n >= SI_CU_FA_MIN_RUN * runs;
    a->fa_tile = b->attn_fa_tile;
    a->fa3_overlap = b->attn_fa3_ov;
    a->n_sm = b->n_sm;
    a->split_bps = b->attn_split_bps;
    a->split_ctx = b->attn_split_ctx;
    a->max_len = si_cu_attn_bucket(max_len);
    a->part = NULL;
    size_t bytes = si_cu_attn_part_bytes(a);
    if (bytes == 0)
        return SI_OK;
    if (bytes > b->attn_part_cap || b->attn_part == NULL) {
        if (b->capturing) {
            b->cap_grow = true;
            return si_err_set(err, SI_ENOMEM, CU_NAME ": attention partials growth during graph capture");
        }
        b->ws_gen++;
        /* Kernels of earlier ATTN ops may still use the old partials. */
        cudaError_t e = cudaStreamSynchronize(b->stream);
        if (e != cudaSuccess)
            return si_err_set(err, SI_EDEVICE, CU_NAME ": %s", cudaGetErrorString(e));
        cudaFree(b->attn_part);
        b->attn_part = NULL;
        b->attn_part_cap = 0;
        size_t want = ((bytes + bytes / 2) + 255) & ~(size_t)255;
        if ((e = cudaMalloc((void **)&b->attn_part, want)) != cudaSuccess) {
            cudaGetLastError();
            b->attn_part = NULL;
            return si_err_set(err, SI_ENOMEM, CU_NAME ": %zu bytes for attention partials: %s", want,
                              cudaGetErrorString(e));
        }
        b->attn_part_cap = want;
    }
    a->part = b->attn_part;
    return SI_OK;
}

int cu_flag_check(si_backend *b, si_err *err)
{
    if (!b->flag_pending)
        return SI_OK;
    b->flag_pending = false;
    volatile unsigned *f = b->flag_host;
    if (f[0] == 0)
        return SI_OK;
    int id = (int)f[1];
    unsigned at = f[2], n_rows = f[3];
    f[0] = 0;
    cudaError_t e = cudaMemsetAsync(b->flag_dev, 0, 4 * sizeof(unsigned), b->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, CU_NAME ": resetting the error flag: %s", cudaGetErrorString(e));
    return si_err_set(err, SI_ERANGE, CU_NAME ": GET_ROWS: id %d at index %u outside [0, %u)", id, at, n_rows);
}

/* Waits for the stream, fetching the GET_ROWS flag with it when needed. */
static int sync_checked(si_backend *b, const char *what, si_err *err)
{
    cudaError_t e = cudaSuccess;
    if (b->flag_pending)
        e = cudaMemcpyAsync(b->flag_host, b->flag_dev, 4 * sizeof(unsigned), cudaMemcpyDeviceToHost, b->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, CU_NAME ": %s: %s", what, cudaGetErrorString(e));
    return cu_flag_check(b, err);
}

static int cuda_buf_alloc(si_backend *b, uint64_t nbytes, si_buf **out, si_err *err)
{
    if (b == NULL || out == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": buf_alloc: NULL argument");
    si_buf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    cudaError_t e = cudaMalloc(&buf->dev, nbytes ? nbytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
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
    if (buf == NULL)
        return;
    if (buf->borrowed) {   /* a kernel plugin's memory: buf_unwrap's job */
        free(buf);
        return;
    }
    if (b != NULL && b->stream != NULL)
        cudaStreamSynchronize(b->stream);   /* no kernel may still use it */
    if (b != NULL) {
        cu_wcache_drop(b, &b->w8c, buf->dev, (const char *)buf->dev + buf->nbytes);
        cu_wcache_drop(b, &b->rg, buf->dev, (const char *)buf->dev + buf->nbytes);
    }
    cudaFree(buf->dev);
    free(buf);
}

static int check_range(const si_buf *buf, uint64_t off, uint64_t n, si_err *err)
{
    if (buf == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": copy: no buffer");
    if (off > buf->nbytes || n > buf->nbytes - off)
        return si_err_set(err, SI_ERANGE, "copy [%llu, +%llu) outside a %llu-byte buffer",
                          (unsigned long long)off, (unsigned long long)n,
                          (unsigned long long)buf->nbytes);
    return SI_OK;
}

/* Copies are ordered after every op enqueued so far (same stream) and
 * synchronous on return, as the ABI asks.  Knob upload_staged: uploads of
 * up to CU_UPLOAD_STAGED bytes (a decode step's token ids and wanted rows;
 * a prefill chunk's ids) are copied into the pinned staging arena and only
 * enqueued: the caller may reuse src at once, and every later op, download
 * or sync is ordered after the copy on the stream, so the upload is as
 * synchronous as the API can observe.  pin_ev is recorded after the copy:
 * the next exec waits on it before reusing the arena.  Before, each was a
 * pageable copy (which waits for the stream) and a stream sync: a round
 * trip a decode step that the GPU idled through.  Larger ones (weights at
 * load), and any the arena has no room for (no pinned memory), are copied
 * from src and waited for. */
#define CU_UPLOAD_STAGED ((uint64_t)64 << 10)

static int cuda_upload(si_backend *b, si_buf *dst, uint64_t off, const void *src, uint64_t n, si_err *err)
{
    int rc = check_range(dst, off, n, err);
    if (rc != SI_OK || n == 0)
        return rc;
    cu_wcache_drop(b, &b->w8c, (char *)dst->dev + off, (char *)dst->dev + off + n);
    cu_wcache_drop(b, &b->rg, (char *)dst->dev + off, (char *)dst->dev + off + n);
    cudaError_t e;
    si_err pin_err = { { 0 } };   /* (no pinned room: the copy below instead) */
    void *stage = b->upload_staged && n <= CU_UPLOAD_STAGED && !b->capturing ? cu_pin_reserve(b, n, &pin_err) : NULL;
    if (stage != NULL) {
        memcpy(stage, src, n);
        e = cudaMemcpyAsync((char *)dst->dev + off, stage, n, cudaMemcpyHostToDevice, b->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(b->pin_ev, b->stream);
        if (e != cudaSuccess) {   /* (no event: the arena is free only once the stream is) */
            cudaStreamSynchronize(b->stream);
            b->pin_used = 0;
        }
    } else {
        e = cudaMemcpyAsync((char *)dst->dev + off, src, n, cudaMemcpyHostToDevice, b->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(b->stream);
    }
    return e == cudaSuccess ? SI_OK : si_err_set(err, SI_EDEVICE, "upload: %s", cudaGetErrorString(e));
}

/* download_start / download_wait (plugin.h 1.3): the copy, and the error
 * flag's behind it when a GET_ROWS ran, land in the slot's pinned space;
 * the wait syncs the slot's event, not the stream, so ops enqueued after
 * the copy (the next decode step) keep running. */
static int dl_slots_alloc(si_backend *b, si_err *err)
{
    const size_t per = SI_DOWNLOAD_START_MAX + 4 * sizeof(unsigned);
    cudaError_t e = cudaMallocHost((void **)&b->dl_pin, per * SI_DOWNLOADS_IN_FLIGHT);
    if (e != cudaSuccess) {
        cudaGetLastError();
        b->dl_pin = NULL;
        return si_err_set(err, SI_ENOMEM, CU_NAME ": pinned memory for downloads in flight: %s", cudaGetErrorString(e));
    }
    for (int i = 0; i < SI_DOWNLOADS_IN_FLIGHT; i++) {
        struct cu_dl_slot *d = &b->dl[i];
        d->host = b->dl_pin + per * (size_t)i;
        d->flag = (unsigned *)(d->host + SI_DOWNLOAD_START_MAX);
        if (d->ev == NULL && (e = cudaEventCreateWithFlags(&d->ev, cudaEventDisableTiming)) != cudaSuccess) {
            cudaGetLastError();
            d->ev = NULL;
            return si_err_set(err, SI_EDEVICE, CU_NAME ": download event: %s", cudaGetErrorString(e));
        }
    }
    return SI_OK;
}

static int cuda_download_start(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, uint32_t *ticket,
                               si_err *err)
{
    int rc = check_range(src, off, n, err);
    if (rc != SI_OK)
        return rc;
    if (ticket == NULL || (dst == NULL && n > 0))
        return si_err_set(err, SI_EINVAL, CU_NAME ": download_start: NULL argument");
    if (n > SI_DOWNLOAD_START_MAX)
        return si_err_set(err, SI_EINVAL, CU_NAME ": download_start of %llu bytes (at most %llu)",
                          (unsigned long long)n, (unsigned long long)SI_DOWNLOAD_START_MAX);
    int i = 0;
    while (i < SI_DOWNLOADS_IN_FLIGHT && b->dl[i].busy)
        i++;
    if (i == SI_DOWNLOADS_IN_FLIGHT)
        return si_err_set(err, SI_EINVAL, CU_NAME ": %d downloads already started and not waited for",
                          SI_DOWNLOADS_IN_FLIGHT);
    if (b->dl_pin == NULL && (rc = dl_slots_alloc(b, err)) != SI_OK)
        return rc;
    struct cu_dl_slot *d = &b->dl[i];
    cudaError_t e = n > 0 ? cudaMemcpyAsync(d->host, (const char *)src->dev + off, n, cudaMemcpyDeviceToHost, b->stream)
                          : cudaSuccess;
    const bool flagged = b->flag_pending;
    if (e == cudaSuccess && flagged)
        e = cudaMemcpyAsync(d->flag, b->flag_dev, 4 * sizeof(unsigned), cudaMemcpyDeviceToHost, b->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(d->ev, b->stream);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, CU_NAME ": download_start: %s", cudaGetErrorString(e));
    b->flag_pending = false;   /* (this slot's wait checks it) */
    d->busy = true;
    d->flagged = flagged;
    d->dst = dst;
    d->n = n;
    d->gen = (d->gen + 1) & 0x0fffffffu;
    *ticket = d->gen << 4 | (uint32_t)i;
    return SI_OK;
}

static int cuda_download_wait(si_backend *b, uint32_t ticket, si_err *err)
{
    const uint32_t i = ticket & 15u;
    struct cu_dl_slot *d = i < SI_DOWNLOADS_IN_FLIGHT ? &b->dl[i] : NULL;
    if (d == NULL || !d->busy || d->gen != ticket >> 4)
        return si_err_set(err, SI_EINVAL, CU_NAME ": download_wait: ticket %u is not a download in flight", ticket);
    d->busy = false;
    cudaError_t e = cudaEventSynchronize(d->ev);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, CU_NAME ": download: %s", cudaGetErrorString(e));
    if (d->n > 0)   /* (a bad GET_ROWS id too: the bytes as the device has them) */
        memcpy(d->dst, d->host, d->n);
    if (d->flagged && d->flag[0] != 0) {
        memcpy(b->flag_host, d->flag, 4 * sizeof(unsigned));
        b->flag_pending = true;   /* cu_flag_check resets the device's flag and says what it held */
        return cu_flag_check(b, err);
    }
    return SI_OK;
}

static int cuda_download(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, si_err *err)
{
    int rc = check_range(src, off, n, err);
    if (rc != SI_OK || n == 0)
        return rc;
    /* Knob download_pinned: a small one lands in a download_start slot,
     * its copy only enqueued, the flag's behind it, one wait for both.
     * Without a free slot or pinned memory: the pageable copy. */
    if (b->download_pinned && n <= SI_DOWNLOAD_START_MAX) {
        uint32_t ticket;
        si_err scratch = { { 0 } };
        rc = cuda_download_start(b, dst, src, off, n, &ticket, &scratch);
        if (rc == SI_OK)
            return cuda_download_wait(b, ticket, err);
        if (rc == SI_ENOMEM)
            b->download_pinned = false;   /* (not asked again each step) */
    }
    cudaError_t e = cudaMemcpyAsync(dst, (const char *)src->dev + off, n, cudaMemcpyDeviceToHost, b->stream);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, "download: %s", cudaGetErrorString(e));
    return sync_checked(b, "download", err);
}

/* post_ids (plugin.h 1.4): post g into its slot, the ids before the gen
 * (a release store: the device's acquire of gen then sees them). */
static int cuda_post_ids(si_backend *b, const int32_t *ids, uint32_t n, si_err *err)
{
    if (b == NULL || ids == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": post_ids: NULL argument");
    if (n < 1 || n > SI_SUBMIT_MAX_ROWS)
        return si_err_set(err, SI_EINVAL, CU_NAME ": post_ids: %u ids (1..%d)", n, SI_SUBMIT_MAX_ROWS);
    if (b->post_ring == NULL || b->post_given >= b->post_queued)
        return si_err_set(err, SI_EINVAL, CU_NAME ": post_ids: no HOST_IDS op queued waits for a post");
    const uint64_t g = ++b->post_given;
    cu_post_slot *sl = &b->post_ring[g % CU_POST_RING];
    memcpy(sl->ids, ids, n * sizeof *ids);
    __atomic_store_n(&sl->gen, (uint32_t)g, __ATOMIC_RELEASE);
    return SI_OK;
}

static int cuda_weight_load(si_backend *b, const si_tensor_info *w, si_tensor *out, si_err *err)
{
    if (b == NULL || w == NULL || out == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": weight_load: NULL argument");
    const char *name = w->name != NULL ? w->name : "?";
    uint32_t blk = 0, bytes = 0;
    if (si_cu_type_ok(w->type))
        si_oc_type_blk(w->type, &blk, &bytes);
    if (blk == 0) {
        const char *tn = b->host->type_name(w->type);
        return si_err_set(err, SI_EUNSUPPORTED, CU_NAME ": tensor '%s': type %s (%u) is not supported "
                          "(F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K are)", name, tn ? tn : "unknown", w->type);
    }
    if (w->ndim < 1 || w->ndim > SI_MAX_DIMS)
        return si_err_set(err, SI_EINVAL, CU_NAME ": tensor '%s': %u dims", name, w->ndim);
    if (w->ne[0] <= 0 || w->ne[0] % blk != 0)
        return si_err_set(err, SI_EINVAL, CU_NAME ": tensor '%s': ne0 = %lld is not a multiple of the block (%u)",
                          name, (long long)w->ne[0], blk);
    memset(out, 0, sizeof *out);
    out->type = w->type;
    out->ndim = w->ndim;
    out->nb[0] = bytes;
    out->ne[0] = w->ne[0];
    uint64_t total = (uint64_t)(w->ne[0] / blk) * bytes;
    for (int i = 1; i < SI_MAX_DIMS; i++) {
        int64_t ne = (uint32_t)i < w->ndim ? w->ne[i] : 1;
        if (ne <= 0 || total > UINT64_MAX / (uint64_t)ne)
            return si_err_set(err, SI_EINVAL, CU_NAME ": tensor '%s': bad ne%d = %lld", name, i, (long long)ne);
        out->ne[i] = ne;
        out->nb[i] = total;
        total *= (uint64_t)ne;
    }
    if (total != w->nbytes)
        return si_err_set(err, SI_EINVAL, CU_NAME ": tensor '%s': %llu bytes of data, shape needs %llu", name,
                          (unsigned long long)w->nbytes, (unsigned long long)total);
    if (w->data == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": tensor '%s': no data", name);
    si_buf *buf = NULL;
    int rc = cuda_buf_alloc(b, total, &buf, err);
    if (rc == SI_OK && (rc = cuda_upload(b, buf, 0, w->data, total, err)) != SI_OK) {
        cuda_buf_free(b, buf);
        buf = NULL;
    }
    if (rc != SI_OK)
        return rc;
    /* knobs gemv_q6r / gemv_q8r: a dense weight's regrouped copy, made now
     * (a product's first use may be inside a graph capture, which makes
     * none).  Not the token embedding: GET_ROWS reads it, and where it is
     * also the LM head (tied) the prefill's last-token product, outside
     * any capture, makes its copy on first use. */
    if (out->ne[0] % 2048 == 0 && out->ne[2] * out->ne[3] == 1 && strstr(name, "token_embd") == NULL)
        (void)cu_rg_get(b, w->type, buf->dev, total);
    out->buf = buf;
    out->offset = 0;
    return SI_OK;
}

static int cuda_sync(si_backend *b, si_err *err)
{
    if (b == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": sync: NULL backend");
    return sync_checked(b, "device error while running ops", err);
}

static const struct si_backend_ops cuda_ops = {
    .size = sizeof(struct si_backend_ops),
    .open = cuda_open,
    .close = cuda_close,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .weight_load = cuda_weight_load,
    .kv_create = cu_kv_create,
    .kv_free = cu_kv_free,
    .kv_seq_reset = cu_kv_seq_reset,
    .supports = cu_supports,
    .exec = cu_exec,
    .sync = cuda_sync,
    .attach_kernel = cu_attach_kernel,
    .download_start = cuda_download_start,
    .download_wait = cuda_download_wait,
    .post_ids = cuda_post_ids,
};

SI_PLUGIN_DEFINE(SI_KIND_BACKEND, CU_NAME, "0.2.0",
                 "CUDA backend for sm_90/sm_120: every op, GGUF weights decoded in registers, "
                 "f32-accumulate GEMV, dense f16/f32 or paged int8 KV cache",
                 cuda_probe, &cuda_ops, NULL)
