// Process-wide switches between the CUDA kernel variants of one operation, for A/B benchmarks
// and the tests that check every variant against the CPU reference (benchmarks/gpu_score_bench,
// tests/cuda). Internal: a library user gets the variant the dispatch picks for the device
// (STYLE: variant switches belong to benches and tests, not to the public headers). Not for use
// while other threads launch work. Defined next to the kernels they switch.
#pragma once

namespace kvevict::cuda {

// Window blocks of 32-128 rows (forward) and 33-128 rows (scoring pass) run warpgroup-MMA
// kernels (wgmma, sm_90a builds; head dim 64 or 128) that read each K/V tile from shared memory
// once per 64 rows; w = 8 at G = 4 (32 rows) runs its forward there and its pass on mma.sync;
// false forces the mma.sync kernels everywhere. Results agree to float accumulation order.
// (src/cuda/window_forward_wgmma.cu)
void set_window_wgmma(bool enabled);
// On bf16 inputs every window term but obcache_vk (and vatp) scores with the key-major pass when
// the wgmma kernels run (blocks of 33-128 rows): the tensor cores sum the terms over the window
// rows (weights rounded to bf16, relative error below 2^-9). false sends them to the row-major
// wgmma pass. (src/cuda/score_pass_keymajor.cu)
void set_window_keymajor(bool enabled);
// Blocks of up to 32 window rows a KV head (w = 8 at G = 4) score on the mma.sync pass, or on the
// key-major pass padded to 64 rows where it applies (bf16, every term but obcache_vk): 0 never,
// 1 (the default) for layers of at least 64K keys, 2 always (tests). H100, 2026-12-06 (h), dropkv
// w = 8, two runs: the key-major pass 0.3815 / 0.3853 against 0.3950 / 0.4068 ms at 128K, 0.1217 /
// 0.1201 against 0.1226 / 0.1228 at 32K, 0.7-5.7% slower at 4K-16K.
// (src/cuda/score_pass_choice.cpp)
void set_window_keymajor_small_rows(int mode);
// The prefill attention's direct-rows forward (launch_window_attention_rows with one key split)
// with its key tiles loaded by the tensor memory accelerator from a producer warp, consumers
// synchronized on mbarriers (no per-tile block barrier); on by default (H100, 2026-12-06 (e):
// 483 / 488 TFLOP/s at 32K / 128K against the plain loads' 416 / 412). Same outputs bit for bit
// (tests check). (src/cuda/window_forward_wgmma.cu)
void set_window_tma(bool enabled);
// The TMA forward above with 128-key tiles and no producer warp: the consumer warp that frees a
// stage last issues its next tile's loads (256 threads, so ptxas may give each 255 registers).
// Applies to 128-row blocks (head dim 64 or 128; 256 with 64-key tiles where one split's blocks
// fill half the SMs, else the mma.sync kernels); takes precedence over set_window_tma. On by
// default (H100, 2026-12-06 (e): 497 / 506 TFLOP/s at 32K / 128K against the 64-key TMA's 434 /
// 469 in the same run). Outputs agree with the 64-key forward to float rounding (another
// online-softmax order), not bit for bit. (src/cuda/window_forward_wgmma.cu)
void set_window_tma_wide(bool enabled);
// The wide TMA forward's loop (head dim <= 128): 0 the plain order; 1, the default,
// FlashAttention-3's intra-warpgroup order (Q K^T of the next tile and P V of this one issued
// together, the next softmax overlapping P V); 2 that order with FA3's ping-pong turns between the
// two warpgroups (named barriers). Same outputs bit for bit (tests check). H100, 2026-12-06 (f),
// Llama-3.1-8B heads: loop 1 at 4K / 32K / 128K 444.6 / 529.6 / 532.8 TFLOP/s against the plain
// loop's 435.5 / 483.1 / 530.1 (loop 2: 449.8 / 519.6 / 527.9). (src/cuda/window_forward_wgmma.cu)
void set_window_wide_loop(int mode);
// The scoring forward's split blocks (wgmma, head dim 64 or 128, one or two warpgroups) in loop
// 1's intra-warpgroup order too: Q K^T of tile t + 1 and P V of tile t issued together, the
// softmax of t + 1 while P V runs, the top keys included (the top step's joins into o and its
// stash wait for the P V in flight); cp.async loads, at least 3 stages. Off by default. Same
// outputs bit for bit (tests check). One-warpgroup blocks measured slower at w = 8 (H100,
// 2026-12-06 (h): 0.1227 against 0.1203 ms at 32K, 4K 7-11% slower), so the question is the
// compute-heavier w = 32 (gpu_score_bench --top-ab). (src/cuda/window_forward_wgmma.cu)
void set_window_split_overlap(bool enabled);
// The fewest key tiles (64 keys; 32 at head dim 256) a split of the window kernels' plans gets
// (window_plan.cpp make_window_plan), 1 to 8; 4 is the default: fewer than 4 made the merge of the
// splits cost about as much as the work it merged (v3). It binds where one wave of blocks would
// want shorter splits: at 4K keys and Hkv = 8 the pass (two blocks per SM) runs 16 splits of 4
// tiles, 128 blocks for 264 slots; the forward with outputs (one block per SM) has its 16 either
// way. 2 and 1 measured no gain (H100, 2026-12-06 (g): dropkv w = 8 within 0.3% at 4K-32K). The
// plans of the workspace sizing and of the launch must agree: switch between calls, never between
// sizing a workspace and using it.
void set_window_min_split_tiles(int tiles);
// The blocks a SM the plan of the 32-64-row wgmma forward aims at (its splits fill one wave of
// them): 0, the default, keeps its rule (1 with outputs, 2 without: two with outputs measured
// slower at 128K, 0.148 against 0.138 ms, session 4); 1 or 2 force it. Two a SM measured slower at
// small n too (H100, 2026-12-06 (g): the forward + merge 13-19% at 4K-8K, 2.5% at 32K). Like the
// split tiles: switch between calls, never between sizing a workspace and using it.
void set_window_forward_blocks_per_sm(int blocks);
// The rows of a wgmma forward block with outputs where a KV head has more than 64 window rows
// (w = 32 at G = 4: 128 rows): 0, the default, one block of two warpgroups (128 rows, one block a
// SM, a block barrier a tile for both); 64, blocks of one warpgroup (64 rows, the row blocks of a
// split reading the same key tiles; two a SM unless set_window_forward_blocks_per_sm says 1).
// Same plan rules otherwise; switch between calls, never between sizing a workspace and using it.
void set_window_forward_row_blocks(int rows);
// Whether this build has the wgmma kernels for the current device.
bool window_wgmma_available();

// Where issue 13's top keys cost time (dropkv / obcache_k / obcache_vk; benchmarks/gpu_score_bench
// --top-ab): 0, the default, runs the top-key forward, its merge's records and the pass's
// leave-one-out terms; 1 runs the same forward and merge but hands the pass no records (its top
// handling idles); 2 runs the plain forward and merge (v9's kernels) and no records. Modes 1 and
// 2 score the top key in the first form, (p / (1 - p))^2 ||a - v||^2, which loses everything as p
// -> 1: timing references, never results. (src/cuda/score_api.cpp)
void set_window_top_keys(int mode);

// The per-head select runs as one cooperative launch when its grid fits on the device at once
// (docs/GPU_NOTES.md v6), else as six launches. false forces the six-launch path (also a
// fallback switch); results are identical either way (tests check both). (src/cuda/select_api.cpp)
void set_select_single_launch(bool enabled);

}  // namespace kvevict::cuda
