/* The fake framework's interface, for tests (found with dlsym). */
#ifndef H3_FAKE_FRAMEWORK_H
#define H3_FAKE_FRAMEWORK_H

#include <stddef.h>
#include <stdint.h>

struct fw_entry {
    const char *name;
    const char *lib;
    const char *kind; /* LAUNCH, LIBCALL, PROCADDR or CONFIG, as in hooks.def */
    /* Calls the entry point with arguments made from `seed`; stores the
     * words it sent in sent[0..*nargs) and returns the result. */
    long long (*call)(uint64_t seed, uint64_t *sent, int *nargs);
};

/* What fw_replay_with() adds to a replayed call stream. */
enum fw_insert {
    FW_INSERT_NONE,
    FW_INSERT_STREAM_SYNC,  /* cudaStreamSynchronize on the next call's stream */
    FW_INSERT_MEMSET,       /* cudaMemsetAsync on that stream */
    FW_INSERT_EVENT,        /* cudaEventRecord on that stream */
    FW_INSERT_DRIVER_COPY,  /* cuMemcpyDtoHAsync_v2 on that stream, found with cuGetProcAddress */
    FW_INSERT_KERNEL,       /* a launch of another kernel on that stream */
    FW_INSERT_OTHER_STREAM, /* a launch of another kernel on another stream */
    FW_INSERT_NCCL,         /* a launch of an NCCL kernel (writes through device memory) on that stream */
    FW_INSERT_COPY_2D,      /* cuMemcpy2DAsync_v2 (driver) on that stream, into insert_ptr (default 0x6000) */
    FW_INSERT_CALLBACK,     /* cuStreamAddCallback on that stream */
    FW_INSERT_OTHER_THREAD, /* a launch of another kernel on that stream, made by another thread (joined) */
    FW_INSERT_DEVICE_RESET, /* cudaDeviceReset */
    FW_INSERT_CAT,          /* a launch of PyTorch's cat kernel reading insert_ptr (an input) into 0x7000 */
    FW_INSERT_CAT_INTO,     /* the same writing into insert_ptr (the output) */
    FW_INSERT_CTX_PAIR,     /* cuDevicePrimaryCtxRetain then cuDevicePrimaryCtxRelease_v2 of device 0 (another
                               library's balanced use) */
    FW_INSERT_CTX_RELEASE,  /* cuDevicePrimaryCtxRelease_v2 of device 0 (its last reference) */
    FW_INSERT_SWAP,         /* the allocator reports the block at insert_ptr (64 bytes) freed, then cudaFree of
                               it (del model; torch.cuda.empty_cache()) */
    FW_INSERT_KERNEL_EXTRA, /* cuLaunchKernel of another kernel with its parameters packed in `extra`, the
                               first pointing at insert_ptr */
    FW_INSERT_IPC_EXPORT,   /* cudaIpcGetMemHandle of insert_ptr (another process may write there) */
    FW_INSERT_MODULE_RELOAD, /* a launch of a kernel, its module unloaded, and a launch of another kernel the
                                driver gave the same handle */
    FW_INSERT_DEVICE_SWITCH, /* cuCtxSetCurrent to device 1's context, a launch there on another stream, and back
                                to device 0's (a tensor moved to cuda:1 and used there, as a device map does) */
    FW_INSERT_SWAP_UNMAP,   /* as FW_INSERT_SWAP, then cuMemUnmap of those 64 bytes instead of cudaFree
                               (empty_cache with expandable segments: the allocator unmaps its pages) */
    FW_INSERT_COUNT
};

struct fw_replay_opts {
    long insert_before;    /* replay call index (0-based) before which to insert; -1: none */
    enum fw_insert insert;
    uintptr_t stream;      /* when nonzero, every call goes to this stream */
    long stop_after;       /* when nonzero, the number of calls to make */
    uintptr_t insert_ptr;  /* FW_INSERT_MEMSET, FW_INSERT_COPY_2D: the address to write; FW_INSERT_KERNEL:
                              when set, the kernel's first parameter */
    int device;            /* 1: the replay runs with device 1's context current (then device 0's again) */
};

/* What fw_graph() does: captures a replay on one stream, instantiates it and
 * launches it on another, writing into a buffer before one of the launches. */
struct fw_graph_opts {
    uintptr_t capture_stream, launch_stream;
    int launches;          /* launches of the executable graph */
    int write_before;      /* before this launch (1-based; 0: none), a memset of 64 bytes at write_ptr */
    uintptr_t write_ptr;
    int unknown_launches;  /* then launches of an executable graph never captured (0xbad0) */
    uintptr_t captured_write; /* when set, the capture begins with a kernel whose parameter points there */
    int replay_around;        /* 1: the replay again, uncaptured, before the first launch and after the last */
};

typedef long fw_graph_fn(const char *path, const struct fw_graph_opts *opts, long *bad_line);
typedef void fw_setup_fn(void);
typedef long fw_replay_fn(const char *path, long *bad_line);
typedef long fw_replay_with_fn(const char *path, const struct fw_replay_opts *opts, long *bad_line);
typedef long long fw_call_fn(const char *name, uint64_t seed, uint64_t *sent, int *nargs);
/* PyTorch's caching allocator reporting `size` bytes at `ptr` (negative: a free) on a device of `type` (1: CUDA). */
typedef void fw_c10_report_fn(uintptr_t ptr, long long size, int type);

#endif
