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

typedef void fw_setup_fn(void);
typedef long long fw_call_fn(const char *name, uint64_t seed, uint64_t *sent, int *nargs);

#endif
