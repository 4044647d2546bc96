/*
 * bench_cpu DIR API N: calls API N times through the fake framework in DIR
 * (dlopen RTLD_LOCAL, as Python loads torch) and prints the nanoseconds per
 * call.  Run with and without the shim preloaded (tests/tools/bench_cpu.sh).
 *
 * BENCH_PAIRS=K (the shim preloaded): K pairs of n/K calls, one observed and
 * one paused (h3shim_pause), which goes first alternating, and prints the
 * median of the pairs' observed-over-paused ratios and of their differences
 * in nanoseconds a call: the GPU scripts' in-process pairs, on the fakes.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

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
    const char *pairs = getenv("BENCH_PAIRS");
    int (*pause)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "h3shim_pause");
    if (pairs != NULL && pause != NULL) {
        long k = atol(pairs), m = n / (k > 0 ? k : 1);
        double *ratio = calloc((size_t)k, sizeof(double)), *diff = calloc((size_t)k, sizeof(double));
        for (long i = 0; i < k && ratio != NULL && diff != NULL; i++) {
            double t[2];
            for (int j = 0; j < 2; j++) {
                int paused = (int)((i + j) % 2); /* which goes first alternates */
                pause(paused);
                double a = now();
                if (bench(argv[2], m) != 0)
                    return 1;
                t[paused] = now() - a;
            }
            pause(0);
            ratio[i] = t[0] / t[1];
            diff[i] = (t[0] - t[1]) / (double)m;
        }
        qsort(ratio, (size_t)k, sizeof(double), cmp_double);
        qsort(diff, (size_t)k, sizeof(double), cmp_double);
        printf("%.4f %.2f\n", ratio[k / 2], diff[k / 2]);
        free(ratio), free(diff);
        return 0;
    }
    double t0 = now();
    long failed = bench(argv[2], n);
    double t1 = now();
    if (failed != 0)
        return 1;
    printf("%.2f\n", (t1 - t0) / (double)n);
    return 0;
}
