/*
 * Generates a fake library's entry points from shim/hooks.def.
 *
 * Before including this file, a fake library defines FAKE_LIB_<lib> for the
 * library it is (e.g. FAKE_LIB_CUDART) and a function
 *     static long long fake_behave(const char *fn, void **argp);
 * that gives the entry point named `fn` its behaviour (argp[i] points to
 * argument i) and returns its result.  Each stub logs its name and arguments
 * to the call log, runs fake_behave, and returns the result a test injected
 * with fakelog_set_result() if any, else fake_behave's.
 */
#include "fake.h"

#define FAKE_UNPAREN(...) __VA_ARGS__
#define FAKE_WORD(i, x) args_[i] = fake_arg_word(&(x), sizeof(x));
#define FAKE_ADDR(i, x) argp_[i] = (void *)&(x);

#define FAKE_STUB(libname, ret, name, params, args)                                    \
    FAKE_EXPORT ret name params                                                        \
    {                                                                                  \
        uint64_t args_[FAKE_MAX_ARGS] = {0};                                               \
        void *argp_[FAKE_MAX_ARGS] = {0};                                                  \
        FAKE_FOR_EACH(FAKE_WORD, FAKE_UNPAREN args)                                    \
        FAKE_FOR_EACH(FAKE_ADDR, FAKE_UNPAREN args)                                    \
        long long injected_ = fakelog_result(#name, LLONG_MIN);                        \
        fakelog_call(libname, #name, FAKE_NARGS(FAKE_UNPAREN args), args_, injected_); \
        long long r_ = fake_behave(#name, argp_);                                      \
        return (ret)(injected_ != LLONG_MIN ? injected_ : r_);                         \
    }

#define FAKE_IF_CUDART(...)
#define FAKE_IF_CUDA(...)
#define FAKE_IF_CUBLASLT(...)
#define FAKE_IF_CUBLAS(...)
#define FAKE_IF_CUDNN(...)
#if defined(FAKE_LIB_CUDART)
#undef FAKE_IF_CUDART
#define FAKE_IF_CUDART(...) FAKE_STUB("cudart", __VA_ARGS__)
#elif defined(FAKE_LIB_CUDA)
#undef FAKE_IF_CUDA
#define FAKE_IF_CUDA(...) FAKE_STUB("cuda", __VA_ARGS__)
#elif defined(FAKE_LIB_CUBLASLT)
#undef FAKE_IF_CUBLASLT
#define FAKE_IF_CUBLASLT(...) FAKE_STUB("cublasLt", __VA_ARGS__)
#elif defined(FAKE_LIB_CUBLAS)
#undef FAKE_IF_CUBLAS
#define FAKE_IF_CUBLAS(...) FAKE_STUB("cublas", __VA_ARGS__)
#elif defined(FAKE_LIB_CUDNN)
#undef FAKE_IF_CUDNN
#define FAKE_IF_CUDNN(...) FAKE_STUB("cudnn", __VA_ARGS__)
#endif

#define H3_HOOK(lib, kind, ret, name, params, args, describe, ...) FAKE_IF_##lib(ret, name, params, args)
#include "hooks.def"
#undef H3_HOOK
