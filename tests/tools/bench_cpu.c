/*
 * bench_cpu DIR API N: calls API N times through the fake framework in DIR
 * (dlopen RTLD_LOCAL, as Python loads torch) and prints the nanoseconds per
 * call.  Run with and without the shim preloaded (tests/tools/bench_cpu.sh).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void setup_fn(void);
typedef long bench_fn(const char *name, long n);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: bench_cpu DIR API N\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/libh3fakeframework.so", argv[1]);
    void *fw = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (fw == NULL) {
        fprintf(stderr, "bench_cpu: %s\n", dlerror());
        return 2;
    }
    ((setup_fn *)dlsym(fw, "fw_setup"))();
    bench_fn *bench = (bench_fn *)dlsym(fw, "fw_bench");
    long n = atol(argv[3]);
    if (bench(argv[2], n / 10) != 0) { /* warm-up, and every call must succeed */
        fprintf(stderr, "bench_cpu: %s failed\n", argv[2]);
        return 1;
    }
    double t0 = now();
    long failed = bench(argv[2], n);
    double t1 = now();
    if (failed != 0)
        return 1;
    printf("%.2f\n", (t1 - t0) / (double)n);
    return 0;
}
