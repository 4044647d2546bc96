# h3shim: plain make.  Every build switch is documented here.
#
#   make                 build/libh3shim.so (release: -O2, no sanitizers)
#   make check           Check suites on the fake CUDA stack, against the
#                        sanitized (ASan+UBSan) and the release library
#   make bench-cpu       per-call interposer overhead on the fake stack
#   make env-table       the README's table of H3SHIM_* variables
#
# Variables:
#   CUDA_HOME   CUDA toolkit whose headers the wrappers are compiled against
#               (default: /usr/local/cuda); only headers are used, nothing
#               is linked.
#   CUDNN_INC   directory of cudnn.h when the toolkit has none (default: the
#               include directory of the nvidia-cudnn Python wheel, if any)
#   NVCC        CUDA compiler for kernels/ (default: $(CUDA_HOME)/bin/nvcc);
#               without one the library is built without kernels
#   CC          C compiler (default: cc)
#   SANITIZE    sanitizer flags for the check build
#               (default: -fsanitize=address,undefined)
#   KERNEL_DEFS nvcc -D flags for kernels/ (default: none); the one test
#               build: -DH3_TEST_SWIGLU_ULP, one element of every swiglu
#               product one unit in the last place off (verify mode's GPU test)

CUDA_HOME ?= /usr/local/cuda
CUDA_INC  ?= $(CUDA_HOME)/include
CUDNN_INC ?= $(if $(wildcard $(CUDA_INC)/cudnn.h),,$(shell python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "include"))' 2>/dev/null))
CC        ?= cc
SANITIZE  ?= -fsanitize=address,undefined -fno-sanitize-recover=undefined
B         := build

WARN      := -Wall -Wextra -Werror -Wformat=2 -Wmissing-prototypes -Wstrict-prototypes -Wvla
CSTD      := -std=c11 -D_GNU_SOURCE
CUDA_CFLAGS := -isystem $(CUDA_INC) $(if $(CUDNN_INC),-isystem $(CUDNN_INC))
SHIM_CFLAGS := $(CSTD) $(WARN) -O2 -g -fPIC -fvisibility=hidden $(CUDA_CFLAGS) -Ishim
SHIM_LDFLAGS := -shared -Wl,--version-script=shim/exports.map -Wl,-z,defs -Wl,-z,now
SHIM_LIBS := -ldl -lpthread

SHIM_SRC  := $(wildcard shim/*.c)
KERNEL_SRC := $(wildcard kernels/*.cu)
KERNEL_HDR := $(wildcard kernels/*.h)
NVCC      ?= $(CUDA_HOME)/bin/nvcc
# No fast math: the kernels replicate PyTorch's rounding exactly.
KERNEL_DEFS ?=
KERNEL_FLAGS := -O3 -std=c++17 -Xptxas -warn-spills -Werror all-warnings $(KERNEL_DEFS)
KERNEL_ARCH := -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_100a,code=sm_100a \
               -gencode arch=compute_103a,code=sm_103a -gencode arch=compute_90,code=compute_90
SHIM_HDR  := $(wildcard shim/*.h shim/*.def kernels/*.h) shim/exports.map

.PHONY: all check check-asan check-release check-tailjump check-exports check-record check-scripts check-fuzz-corpus bench-cpu env-table clean cuda-headers

all: $(B)/libh3shim.so

cuda-headers:
	@for h in cuda.h cudaTypedefs.h cuda_runtime_api.h cublasLt.h cublas_v2.h cudnn.h; do \
	  test -f "$(CUDA_INC)/$$h" || test -f "$(CUDNN_INC)/$$h" || { echo "h3shim: $$h not found in $(CUDA_INC) $(CUDNN_INC): set CUDA_HOME to a CUDA 12/13 toolkit, and CUDNN_INC to cuDNN's headers" >&2; exit 1; }; \
	done

# The fused ops' kernels: every kernels/*.cu in one fatbin (SASS for the
# allowlisted SMs, PTX for later ones), embedded in the library as data and
# loaded with the driver API at first use.  Without nvcc the blob is empty
# and every op falls back to the unfused calls (reason no_kernels).
$(B)/kernels.fatbin: $(KERNEL_SRC) $(KERNEL_HDR)
	@mkdir -p $(@D)
	@if [ -x "$(NVCC)" ] || command -v "$(NVCC)" >/dev/null 2>&1; then \
	  printf '#include "%s"\n' $(abspath $(KERNEL_SRC)) > $(B)/kernels_all.cu && \
	  echo "$(NVCC) -fatbin $(KERNEL_ARCH) -o $@ $(B)/kernels_all.cu" && \
	  $(NVCC) -fatbin $(KERNEL_FLAGS) $(KERNEL_ARCH) -o $@ $(B)/kernels_all.cu; \
	else \
	  echo "h3shim: warning: $(NVCC) not found: building without kernels (every op falls back)" >&2; \
	  : > $@; \
	fi

$(B)/kernels_fatbin.o: $(B)/kernels.fatbin
	cd $(B) && ld -r -b binary -z noexecstack -o kernels_fatbin.o kernels.fatbin

$(B)/libh3shim.so: $(SHIM_SRC) $(SHIM_HDR) $(B)/kernels_fatbin.o | cuda-headers
	@mkdir -p $(@D)
	$(CC) $(SHIM_CFLAGS) $(SHIM_LDFLAGS) -o $@ $(SHIM_SRC) $(B)/kernels_fatbin.o $(SHIM_LIBS)

$(B)/asan/libh3shim.so: $(SHIM_SRC) $(SHIM_HDR) $(B)/kernels_fatbin.o | cuda-headers
	@mkdir -p $(@D)
	$(CC) $(SHIM_CFLAGS) -O1 -fno-omit-frame-pointer $(SANITIZE) $(SHIM_LDFLAGS) -o $@ $(SHIM_SRC) $(B)/kernels_fatbin.o $(SHIM_LIBS)

include tests/tests.mk

clean:
	rm -rf $(B)

# h3sig: the signature validator, built from the library's own parser.
$(B)/h3sig: tools/h3sig.c shim/sigfile.c $(SHIM_HDR) | cuda-headers
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) -O2 -g $(CUDA_CFLAGS) -Ishim -o $@ tools/h3sig.c shim/sigfile.c

all: $(B)/h3sig

# libFuzzer on the signature parser (clang with compiler-rt), for
# FUZZ_SECONDS seconds (default 600) on the corpus in tests/fuzz/corpus.
FUZZ_SECONDS ?= 600
$(B)/fuzz_sigfile: tests/fuzz/fuzz_sigfile.c shim/sigfile.c $(SHIM_HDR)
	@mkdir -p $(@D)
	clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined $(CUDA_CFLAGS) -Ishim -o $@ \
	  tests/fuzz/fuzz_sigfile.c shim/sigfile.c

fuzz: $(B)/fuzz_sigfile
	@mkdir -p $(B)/fuzz-corpus
	$(B)/fuzz_sigfile -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -artifact_prefix=$(B)/fuzz- \
	  $(B)/fuzz-corpus tests/fuzz/corpus

# The same for the environment parser (shim/config.c).
$(B)/fuzz_config: tests/fuzz/fuzz_config.c shim/config.c shim/log.c $(SHIM_HDR)
	@mkdir -p $(@D)
	clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined $(CUDA_CFLAGS) -Ishim -o $@ \
	  tests/fuzz/fuzz_config.c shim/config.c shim/log.c

fuzz-config: $(B)/fuzz_config
	@mkdir -p $(B)/fuzz-corpus-config
	$(B)/fuzz_config -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(B)/fuzz-config- \
	  $(B)/fuzz-corpus-config tests/fuzz/corpus-config
.PHONY: fuzz fuzz-config

# Installs the library, h3sig and the signatures under PREFIX (default
# /usr/local); the library finds PREFIX/share/h3shim/signatures by itself.
PREFIX ?= /usr/local
install: $(B)/libh3shim.so $(B)/h3sig
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/h3shim/signatures
	install -m 0755 $(B)/libh3shim.so $(DESTDIR)$(PREFIX)/lib/libh3shim.so
	install -m 0755 $(B)/h3sig $(DESTDIR)$(PREFIX)/bin/h3sig
	install -m 0644 signatures/*.sig signatures/FORMAT.md $(DESTDIR)$(PREFIX)/share/h3shim/signatures/
.PHONY: install
