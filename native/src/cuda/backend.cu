/*
 * cuda/backend.cu: the CUDA backend table and everything that is not a
 * kernel: device discovery, weight upload, the per-context state (stream,
 * pinned token staging, attention workspace), memory, sync, copies, and the
 * decode-step graph (step_begin / step_end).
 *
 * Errors: an op never fails by itself; the first CUDA error of a context is
 * recorded (common.cuh) and sync turns it into LKV_ERR_DEVICE with a message
 * through lkv_fail. The library loads without a driver: cudart_static only
 * opens it on the first call, and lkv_cuda_device_count then returns 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.cuh"
#include "matmul.cuh"
#include "quant.cuh"

// ---------------------------------------------------------------- devices

extern "C" LKV_API int32_t lkv_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();   /* no driver or no GPU: clear the sticky state */
        return 0;
    }
    return n;
}

extern "C" LKV_API lkv_status lkv_cuda_mem_info(int64_t *free_bytes, int64_t *total_bytes) {
    if (!free_bytes || !total_bytes) return lkv_fail(LKV_ERR_INVALID_ARG, "NULL output");
    if (lkv_cuda_device_count() <= 0) return lkv_fail(LKV_ERR_UNSUPPORTED, "no CUDA device");
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess)
        return lkv_fail(LKV_ERR_DEVICE, "cudaMemGetInfo: %s", cudaGetErrorString(e));
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
    return LKV_OK;
}

// ---------------------------------------------------------------- model

/* Per-model state: the distinct device copies (tied weights share one). */
struct cuda_model_state {
    int n, cap;
    const void **host;   /* (n,) host data pointer of each copy */
    void **dev;          /* (n,) its device copy */
    lkv_status st;
};

/* the weight types the CUDA kernels are instantiated for (quant.cuh) */
static bool cuda_has_weight_type(int32_t type) {
    switch (type) {
#define X(T) case T:
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
        return true;
    default:
        return false;
    }
}

static void upload_weight(lkv_weight *w, void *ud) {
    cuda_model_state *s = (cuda_model_state *)ud;
    if (s->st != LKV_OK || !w->data || w->host) return;   /* host: n_cpu_moe's experts */
    if (!cuda_has_weight_type(w->type)) {
        const lkv_traits *t = lkv_type_traits(w->type);
        s->st = lkv_fail(LKV_ERR_UNSUPPORTED, "the CUDA backend has no kernels for weight type "
                         "%s (id %d); load this model with device=\"cpu\"",
                         t ? t->name : "unknown", (int)w->type);
        return;
    }
    for (int i = 0; i < s->n; i++) {
        if (s->host[i] == w->data) { w->dev = s->dev[i]; return; }
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        const void **h = (const void **)realloc(s->host, cap * sizeof(*h));
        if (h) s->host = h;
        void **d = (void **)realloc(s->dev, cap * sizeof(*d));
        if (d) s->dev = d;
        if (!h || !d) { s->st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "weight table"); return; }
        s->cap = cap;
    }
    const size_t bytes = (size_t)w->rows * w->row_bytes;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e == cudaSuccess) e = cudaMemcpy(p, w->data, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        if (p) cudaFree(p);
        cudaGetLastError();
        s->st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "copying a weight of %zu bytes to the GPU: %s",
                         bytes, cudaGetErrorString(e));
        return;
    }
    s->host[s->n] = w->data;
    s->dev[s->n] = p;
    s->n++;
    w->dev = p;
}

static void clear_dev(lkv_weight *w, void *ud) { (void)ud; w->dev = NULL; }

static void cuda_model_free(struct lkv_model *m) {
    cuda_model_state *s = (cuda_model_state *)m->be_state;
    if (!s) return;
    for (int i = 0; i < s->n; i++) cudaFree(s->dev[i]);
    free(s->host);
    free(s->dev);
    free(s);
    m->be_state = NULL;
    lkv_model_foreach_weight(m, clear_dev, NULL);
    m->output.dev = NULL;
}

static lkv_status cuda_model_init(struct lkv_model *m) {
    if (lkv_cuda_device_count() <= 0)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "device=cuda but no CUDA device is usable");
    cuda_model_state *s = (cuda_model_state *)calloc(1, sizeof(*s));
    if (!s) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "cuda model state");
    s->st = LKV_OK;
    m->be_state = s;
    lkv_model_foreach_weight(m, upload_weight, s);
    /* a tied output is a copy of tok_embd's struct that foreach skips */
    if (m->tied_output) m->output.dev = m->tok_embd.dev;
    if (s->st != LKV_OK) {
        lkv_status st = s->st;
        cuda_model_free(m);
        return st;
    }
    /* cudaMemcpy from pageable memory may return before its DMA has landed, and
     * the contexts' streams do not wait for the legacy stream: wait here */
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cudaGetLastError();
        cuda_model_free(m);
        return lkv_fail(LKV_ERR_DEVICE, "copying the weights to the GPU: %s", cudaGetErrorString(e));
    }
    return LKV_OK;
}

// ---------------------------------------------------------------- context

/* Workspace for split attention partials: enough for a long decode context
 * in one launch; longer ones take several launches. */
static const size_t ATTN_WS_BYTES = (size_t)32 << 20;

/* 8-bit activations of the integer matmuls: the widest input of any matmul */
static int xq_cols_of(const lkv_model_params *hp) {
    int c = hp->n_embd;
    if (hp->n_ff > c) c = hp->n_ff;
    if (hp->n_head * hp->head_dim > c) c = hp->n_head * hp->head_dim;
    /* hybrids: ssm_out's input, the delta rule's nv * dv outputs */
    if (hp->ssm_n_v_heads * hp->ssm_head_v_dim > c) c = hp->ssm_n_v_heads * hp->ssm_head_v_dim;
    /* an MTP block (mtp.c): eh_proj's input, [embedding | hidden] */
    if (hp->n_nextn > 0 && 2 * hp->n_embd > c) c = 2 * hp->n_embd;
    return (c + 31) / 32 * 32;
}

static void cuda_ctx_free(lkv_bctx *b) {
    if (!b) return;
    if (b->stream) cudaStreamSynchronize(b->stream);
    lkv_cuda_copier_free(b);
    if (b->graph_exec) cudaGraphExecDestroy(b->graph_exec);
    lkv_cuda_rope_release(b);
    if (b->d_pos) cudaFree(b->d_pos);
    if (b->pick_d) cudaFree(b->pick_d);
    if (b->pick_h) cudaFreeHost(b->pick_h);
    if (b->h_pos) cudaFreeHost(b->h_pos);
    if (b->attn_ws) cudaFree(b->attn_ws);
    if (b->xq) cudaFree(b->xq);
    lkv_cuda_gemm_wg_free(b);
    if (b->xd) cudaFree(b->xd);
    if (b->xs) cudaFree(b->xs);
    if (b->xq2) cudaFree(b->xq2);
    if (b->xd2) cudaFree(b->xd2);
    if (b->xs2) cudaFree(b->xs2);
    if (b->d_tokens) cudaFree(b->d_tokens);
    if (b->h_tokens) cudaFreeHost(b->h_tokens);
    if (b->tokens_free) cudaEventDestroy(b->tokens_free);
    if (b->stream) cudaStreamDestroy(b->stream);
    cudaGetLastError();
    free(b);
}

static lkv_status cuda_ctx_init(lkv_bctx **out, const struct lkv_model *m, int n_threads,
                                int max_tokens) {
    (void)n_threads;
    *out = NULL;
    const int hd = m->hp.head_dim;
    if (hd <= 0 || hd > 256 || hd % 32)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "the CUDA backend's attention needs head_dim a "
                        "multiple of 32 and at most 256; this model has head_dim %d (use "
                        "device=\"cpu\")", hd);
    lkv_bctx *b = (lkv_bctx *)calloc(1, sizeof(*b));
    if (!b) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "cuda context");
    b->m = m;
    b->max_tokens = max_tokens > 0 ? max_tokens : 1;
    cudaError_t e = cudaGetDevice(&b->device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&b->n_sm, cudaDevAttrMultiProcessorCount, b->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&b->tokens_free, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&b->h_tokens, b->max_tokens * sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMalloc((void **)&b->d_tokens, b->max_tokens * sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMallocHost((void **)&b->h_pos, sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMalloc((void **)&b->d_pos, sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMalloc((void **)&b->attn_ws, ATTN_WS_BYTES);
    if (e == cudaSuccess) b->attn_ws_bytes = ATTN_WS_BYTES;
    if (e == cudaSuccess) e = lkv_cuda_rope_alloc(b, hd / 2);
    /* 8-bit activations of the integer matmuls: the widest input of any matmul */
    {
        b->xq_cols = xq_cols_of(&m->hp);
        /* the library's one debug switch (README): LKV_CUDA_GRAPH=0 launches
         * every decode step op by op instead of replaying a captured graph */
        const char *env = getenv("LKV_CUDA_GRAPH");
        b->graph_on = !(env && env[0] == '0');
        b->fast = 1;   /* gpu_kernels: the fastest kernels unless set_fast(0) */
        int major = 0;
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, b->device);
        b->pdl = major >= 9;
        b->xq_rows = b->max_tokens > 8 ? b->max_tokens : 8;
        const size_t nq = (size_t)b->xq_rows * b->xq_cols;
        if (e == cudaSuccess) e = cudaMalloc((void **)&b->xq, nq);
        if (e == cudaSuccess) e = cudaMalloc((void **)&b->xd, nq / 32 * sizeof(float));
        if (e == cudaSuccess) e = cudaMalloc((void **)&b->xs, nq / 32 * sizeof(float));
        /* the second set: only prefill GEMMs (more than 8 tokens) write it */
        if (b->xq_rows > 8) {
            if (e == cudaSuccess) e = cudaMalloc((void **)&b->xq2, nq);
            if (e == cudaSuccess) e = cudaMalloc((void **)&b->xd2, nq / 32 * sizeof(float));
            if (e == cudaSuccess) e = cudaMalloc((void **)&b->xs2, nq / 32 * sizeof(float));
        }
    }
    if (e == cudaSuccess) e = cudaEventRecord(b->tokens_free, b->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cuda_ctx_free(b);
        return lkv_fail(LKV_ERR_DEVICE_MEMORY, "creating the CUDA context state: %s",
                        cudaGetErrorString(e));
    }
    lkv_cuda_attn_setup();
    b->wg_ok = lkv_cuda_gemm_wg_probe(b);
    *out = b;
    return LKV_OK;
}

/* The memory plan (memplan.c, llamakv.h lkv_memory_plan_compute): each device
 * allocation cuda_ctx_init above makes for a context of max_tokens rows, then
 * those made on first use: the greedy pick's id (sample.cu) and gemm_wg's
 * buffers (x16, and its weight scratch where the chooser sends a matmul
 * weight's prefill to gemm_wg or the staged attention decodes the KV types
 * into it). Without a GPU here the plan assumes sm_90a (gemm_wg on), the
 * larger; elsewhere, gemm_wg runs on compute capability 9 only. */
bool lkv_cuda_mm_prefill_wg(int type, int fast);              /* choose_matmul.cu */
bool lkv_cuda_attn_stage_types(int type_k, int type_v);       /* attn_stage.cu */
size_t lkv_cuda_rope_bytes(int pairs, int max_tokens);        /* rope_table.cu */
void lkv_cuda_gemm_wg_plan(int n, int cols, bool scratch,     /* gemm_wg.cu */
                           void (*add)(void *ud, int64_t bytes), void *ud);

typedef struct { int fast; bool wg; const lkv_weight *skip; } wg_need;

static void weight_needs_wg(lkv_weight *w, void *ud) {
    wg_need *n = (wg_need *)ud;
    if (w != n->skip && w->data && w->rows > 1 && lkv_cuda_mm_prefill_wg((int)w->type, n->fast))
        n->wg = true;
}

extern "C" void lkv_cuda_ctx_plan(const lkv_model *m, int max_tokens, int32_t type_k,
                                  int32_t type_v, int fast, void (*add)(void *ud, int64_t bytes),
                                  void *ud) {
    const int64_t rows = max_tokens > 0 ? max_tokens : 1;
    add(ud, rows * (int64_t)sizeof(int32_t));                       /* d_tokens */
    add(ud, (int64_t)sizeof(int32_t));                              /* d_pos */
    add(ud, (int64_t)ATTN_WS_BYTES);                                /* attn_ws */
    add(ud, (int64_t)lkv_cuda_rope_bytes(m->hp.head_dim / 2, (int)rows));   /* rope_d */
    const int64_t xq_rows = rows > 8 ? rows : 8, nq = xq_rows * xq_cols_of(&m->hp);
    for (int set = 0; set < (xq_rows > 8 ? 2 : 1); set++) {         /* xq, xd, xs (and 2) */
        add(ud, nq);
        add(ud, nq / 32 * (int64_t)sizeof(float));
        add(ud, nq / 32 * (int64_t)sizeof(float));
    }
    add(ud, (int64_t)sizeof(int32_t));                              /* pick_d */
    int dev = 0, major = 9;
    if (lkv_cuda_device_count() > 0 && (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)) {
        cudaGetLastError();
        major = 9;
    }
    if (major != 9) return;                                         /* no gemm_wg */
    /* tok_embd is read by get_rows, not multiplied; a tied output is (foreach skips it) */
    wg_need need = {fast, lkv_cuda_attn_stage_types(type_k, type_v), &m->tok_embd};
    lkv_model *mm = (lkv_model *)m;                                 /* (foreach only reads) */
    lkv_model_foreach_weight(mm, weight_needs_wg, &need);
    if (m->tied_output) weight_needs_wg(&mm->output, &need);
    lkv_cuda_gemm_wg_plan((int)rows, xq_cols_of(&m->hp), need.wg, add, ud);
}

// ---------------------------------------------------------------- memory and movement

static void *cuda_alloc(lkv_bctx *b, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        cudaGetLastError();   /* an allocation failure is reported by the caller, not sticky */
        return NULL;
    }
    return p;
}

static void cuda_free(lkv_bctx *b, void *p) {
    (void)b;
    if (p) cudaFree(p);
}

static void cuda_download(lkv_bctx *b, void *host_dst, const void *src, size_t bytes) {
    LKV_CUDA_CALL(b, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, b->stream),
                  "download");
    LKV_CUDA_CALL(b, cudaStreamSynchronize(b->stream), "download");
}

/* host_src may be reused on return, so the copy is waited for (uploads are
 * rare: state restore, set-up), and never inside a captured step. */
static void cuda_upload(lkv_bctx *b, void *dst, const void *host_src, size_t bytes) {
    LKV_CUDA_CALL(b, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, b->stream),
                  "upload");
    LKV_CUDA_CALL(b, cudaStreamSynchronize(b->stream), "upload");
}

static void cuda_copy_d2d(lkv_bctx *b, void *dst, const void *src, size_t bytes) {
    LKV_CUDA_CALL(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream),
                  "copy_d2d");
}

static lkv_status cuda_sync(lkv_bctx *b) {
    if (b->err == cudaSuccess) LKV_CUDA_CALL(b, cudaStreamSynchronize(b->stream), "sync");
    if (b->err != cudaSuccess)
        return lkv_fail(LKV_ERR_DEVICE, "CUDA error in %s: %s", b->err_where ? b->err_where : "?",
                        cudaGetErrorString(b->err));
    return LKV_OK;
}

// ---------------------------------------------------------------- decode-step graph

/* A step is captured once per key and replayed while the key stays the same
 * (decode: one token, the same number of attention chunks, i.e. 256 steps in
 * a row with the default chunk). The position reaches the kernels through
 * d_pos, which the graph's first node fills from pinned h_pos (rope, the KV
 * row writes and attention read it: common.cuh), the tokens through get_rows'
 * pinned staging. A new key updates the executable graph in place when the
 * topology allows, else instantiates a new one. LKV_CUDA_GRAPH=0 turns
 * graphs off. A graph captured under other kernel choices (the context's
 * kind, or the test-only tune.h overrides) is dropped before it could replay. A bounded KV pool records events and queries them between
 * two queues, which a graph cannot hold: such contexts run their steps
 * directly. */
/* the test-only overrides of the kernel choice (tune.h): zero, the library's own */
lkv_cuda_tune lkv_cuda_tuning;

static void cuda_graph_drop(lkv_bctx *b) {
    cudaStreamSynchronize(b->stream);
    cudaGraphExecDestroy(b->graph_exec);
    cudaGetLastError();
    b->graph_exec = NULL;
    b->rope_in_graph = 0;
}

static int cuda_step_begin(lkv_bctx *b, uint64_t key, const int32_t *tokens, int n, int32_t pos0) {
    if (!b->graph_on || b->err != cudaSuccess || b->copier || n <= 0 || n > b->max_tokens) return 0;
    /* the staging buffers may still feed the previous step's copies */
    LKV_CUDA_CALL(b, cudaEventSynchronize(b->tokens_free), "step_begin");
    if (b->graph_exec && b->graph_gen != lkv_cuda_tuning.gen) cuda_graph_drop(b);
    *b->h_pos = pos0;
    if (b->graph_exec && b->graph_key == key) {
        memcpy(b->h_tokens, tokens, (size_t)n * sizeof(int32_t));
        lkv_cuda_rope_replay(b, pos0, n);
        LKV_CUDA_CALL(b, cudaGraphLaunch(b->graph_exec, b->stream), "step: graph launch");
        LKV_CUDA_CALL(b, cudaEventRecord(b->tokens_free, b->stream), "step: graph launch");
        lkv_cuda_rope_replayed(b);
        b->graph_replays++;
        return 1;
    }
    lkv_cuda_rope_capture_begin(b);
    cudaError_t e = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        b->graph_on = 0;   /* run directly from now on */
        return 0;
    }
    b->capturing = 1;
    b->cap_key = key;
    LKV_CUDA_CALL(b, cudaMemcpyAsync(b->d_pos, b->h_pos, sizeof(int32_t), cudaMemcpyHostToDevice,
                                     b->stream), "step_begin: position");
    b->dyn_pos = b->d_pos;
    b->cap_pos0 = pos0;
    return 0;
}

static int cuda_step_end(lkv_bctx *b) {
    if (!b->capturing) return 0;
    b->capturing = 0;
    b->dyn_pos = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    if (e == cudaSuccess && b->err == cudaSuccess && b->graph_exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(b->graph_exec, g, &info) != cudaSuccess) {
            cudaGetLastError();
            cudaGraphExecDestroy(b->graph_exec);
            b->graph_exec = NULL;
        }
    }
    if (e == cudaSuccess && b->err == cudaSuccess && !b->graph_exec) {
        e = cudaGraphInstantiate(&b->graph_exec, g, 0);
        if (e != cudaSuccess) b->graph_exec = NULL;
        else b->graph_builds++;
    }
    if (g) cudaGraphDestroy(g);
    const bool kept = e == cudaSuccess && b->err == cudaSuccess && b->graph_exec;
    lkv_cuda_rope_capture_end(b, kept);
    if (!kept) {
        /* nothing ran: the caller issues the ops again, directly */
        cudaGetLastError();
        if (b->graph_exec) cudaGraphExecDestroy(b->graph_exec);
        b->graph_exec = NULL;
        b->err = cudaSuccess;
        b->err_where = NULL;
        b->graph_on = 0;
        return -1;
    }
    b->graph_key = b->cap_key;
    b->graph_gen = lkv_cuda_tuning.gen;
    LKV_CUDA_CALL(b, cudaGraphLaunch(b->graph_exec, b->stream), "step_end: launch");
    LKV_CUDA_CALL(b, cudaEventRecord(b->tokens_free, b->stream), "step_end");
    lkv_cuda_rope_replayed(b);
    b->graph_replays++;
    return 0;
}

/* the kernel kind; a captured graph holds the other kind's kernels */
static void cuda_set_fast(lkv_bctx *b, int fast) {
    if (b->fast != fast && b->graph_exec) cuda_graph_drop(b);
    b->fast = fast;
}

// ---------------------------------------------------------------- table

extern "C" const lkv_backend lkv_backend_cuda = {
    /* name */ "cuda",
    /* model_init */ cuda_model_init,
    /* model_free */ cuda_model_free,
    /* ctx_init */ cuda_ctx_init,
    /* ctx_free */ cuda_ctx_free,
    /* alloc */ cuda_alloc,
    /* free */ cuda_free,
    /* get_rows */ lkv_cuda_get_rows,
    /* rmsnorm */ lkv_cuda_rmsnorm,
    /* add_rmsnorm */ lkv_cuda_add_rmsnorm,
    /* matmul */ lkv_cuda_matmul,
    /* add_bias */ lkv_cuda_add_bias,
    /* rope */ lkv_cuda_rope,
    /* rope_store */ lkv_cuda_rope_store,
    /* swiglu */ lkv_cuda_swiglu,
    /* matmul_swiglu */ lkv_cuda_matmul_swiglu,
    /* add */ lkv_cuda_add,
    /* to_type */ lkv_cuda_to_type,
    /* attn_state_bytes */ lkv_cuda_attn_state_bytes,
    /* attn_reset */ lkv_cuda_attn_reset,
    /* attn_accum */ lkv_cuda_attn_accum,
    /* attn_finish */ lkv_cuda_attn_finish,
    /* attn_whole */ lkv_cuda_attn_whole,
    /* download */ cuda_download,
    /* upload */ cuda_upload,
    /* copy_d2d */ cuda_copy_d2d,
    /* sync */ cuda_sync,
    /* step_begin */ cuda_step_begin,
    /* step_end */ cuda_step_end,
    /* host_alloc */ lkv_cuda_host_alloc,
    /* host_free */ lkv_cuda_host_free,
    /* copier_init */ lkv_cuda_copier_init,
    /* copy_async */ lkv_cuda_copy_async,
    /* compute_wait_copy */ lkv_cuda_compute_wait_copy,
    /* compute_mark */ lkv_cuda_compute_mark,
    /* copy_wait_compute */ lkv_cuda_copy_wait_compute,
    /* copy_sync */ lkv_cuda_copy_sync,
    /* copy_async_2d */ lkv_cuda_copy_async_2d,
    /* set_fast */ cuda_set_fast,
    /* split_rows */ lkv_cuda_split_rows,
    /* sigmoid_mul */ lkv_cuda_sigmoid_mul,
    /* rmsnorm_gated */ lkv_cuda_rmsnorm_gated,
    /* ssm_conv */ lkv_cuda_ssm_conv,
    /* delta_rule */ lkv_cuda_delta_rule,
    /* phase_arena */ 1,
    /* attn_rows */ lkv_cuda_attn_rows,
    /* rope_store_rows */ lkv_cuda_rope_store_rows,
    /* geglu */ lkv_cuda_geglu,
    /* scale */ lkv_cuda_scale,
    /* softcap */ lkv_cuda_softcap,
    /* pick_greedy */ lkv_cuda_pick_greedy,
    /* moe_topk */ lkv_cuda_moe_topk,
    /* gather_rows */ lkv_cuda_gather_rows,
    /* scatter_add_rows */ lkv_cuda_scatter_add_rows,
    /* zero */ lkv_cuda_zero,
};
