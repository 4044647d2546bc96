# Tests: the fake CUDA stack (build/fake/), the Check suites and tools.
# Included by the top-level Makefile.

CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck)
FAKE_CFLAGS  := $(CSTD) $(WARN) -Wno-missing-prototypes -O1 -g -fPIC -fno-omit-frame-pointer $(SANITIZE) \
                $(CUDA_CFLAGS) -Ishim -Itests/fake
FAKE_DIR     := $(B)/fake
FAKE_HDR     := $(wildcard tests/fake/*.h) shim/hooks.def shim/nvapi.h $(wildcard kernels/*.h)
FAKE_RPATH   := -Wl,-rpath,'$$ORIGIN'

# name:soname:version-node (node empty: unversioned, like the real driver)
FAKE_LIBS := cudart:libcudart.so.13:libcudart.so.13 cuda:libcuda.so.1: \
             cublasLt:libcublasLt.so.13:libcublasLt.so.13 cublas:libcublas.so.13:libcublas.so.13 \
             cudnn:libcudnn.so.9:libcudnn.so.9 c10:libc10.so:
fake_soname = $(word 2,$(subst :, ,$(filter $(1):%,$(FAKE_LIBS))))
fake_node   = $(word 3,$(subst :, ,$(filter $(1):%,$(FAKE_LIBS))))
FAKE_SOS    := $(foreach l,$(FAKE_LIBS),$(FAKE_DIR)/$(word 2,$(subst :, ,$(l))))

# FAKE_SET(dir, cflags): the whole fake stack built into `dir`.  The tests
# use a sanitized set (build/fake), the CPU benchmark an optimised one
# (build/bench/fake).
define FAKE_SET
$(1)/libh3fakelog.so: tests/fake/fakelog.c $(FAKE_HDR)
	@mkdir -p $$(@D)
	$$(CC) $(2) -shared -Wl,-soname,libh3fakelog.so -o $$@ $$< -lpthread

$(1)/libh3fakeframework.so: tests/fake/framework.c $(FAKE_HDR) $(foreach l,$(FAKE_LIBS),$(1)/$(word 2,$(subst :, ,$(l))))
	$$(CC) $(2) -shared -Wl,-soname,libh3fakeframework.so -o $$@ $$< \
	  -L$(1) -l:libcudart.so.13 -l:libcuda.so.1 -l:libcublasLt.so.13 -l:libcublas.so.13 \
	  -l:libcudnn.so.9 -l:libc10.so -lh3fakelog -Wl,-rpath,'$$$$ORIGIN'
endef

# FAKE_LIB_RULE(dir, cflags, name): one fake CUDA library with its soname
# and version node.
define FAKE_LIB_RULE
$(1)/$(call fake_soname,$(3)): tests/fake/fake_$(3).c $(FAKE_HDR) $(1)/libh3fakelog.so
	$(if $(call fake_node,$(3)),printf '%s { global: *; };\n' $(call fake_node,$(3)) > $(1)/$(3).map)
	$$(CC) $(2) -shared -Wl,-soname,$(call fake_soname,$(3)) -Wl,-Bsymbolic \
	  $(if $(call fake_node,$(3)),-Wl$(comma)--version-script=$(1)/$(3).map) \
	  -o $$@ $$< -L$(1) -lh3fakelog -Wl,-rpath,'$$$$ORIGIN' -ldl -lpthread
endef
comma := ,
FAKE_NAMES := $(foreach l,$(FAKE_LIBS),$(word 1,$(subst :, ,$(l))))
$(eval $(call FAKE_SET,$(FAKE_DIR),$(FAKE_CFLAGS)))
$(foreach l,$(FAKE_NAMES),$(eval $(call FAKE_LIB_RULE,$(FAKE_DIR),$(FAKE_CFLAGS),$(l))))

BENCH_DIR    := $(B)/bench/fake
BENCH_CFLAGS := $(CSTD) $(WARN) -Wno-missing-prototypes -O2 -g -fPIC $(CUDA_CFLAGS) -Ishim -Itests/fake
$(eval $(call FAKE_SET,$(BENCH_DIR),$(BENCH_CFLAGS)))
$(foreach l,$(FAKE_NAMES),$(eval $(call FAKE_LIB_RULE,$(BENCH_DIR),$(BENCH_CFLAGS),$(l))))

$(FAKE_DIR)/libh3faketriton.so: tests/fake/triton.c $(FAKE_HDR) $(FAKE_DIR)/libh3fakelog.so
	$(CC) $(FAKE_CFLAGS) -shared -o $@ $< -L$(FAKE_DIR) -lh3fakelog $(FAKE_RPATH) -ldl

$(FAKE_DIR)/libh3fakector.so: tests/fake/ctor.c $(FAKE_HDR) $(FAKE_SOS)
	$(CC) $(FAKE_CFLAGS) -shared -o $@ $< -L$(FAKE_DIR) -l:libcudart.so.13 -lh3fakelog $(FAKE_RPATH)

$(FAKE_DIR)/libh3nexta.so: tests/fake/next_a.c
	@mkdir -p $(@D)
	$(CC) $(FAKE_CFLAGS) -shared -Wl,-soname,libh3nexta.so -o $@ $< -ldl

$(FAKE_DIR)/libh3nextb.so: tests/fake/next_b.c
	@mkdir -p $(@D)
	$(CC) $(FAKE_CFLAGS) -shared -Wl,-soname,libh3nextb.so -o $@ $<

FAKE_ALL := $(FAKE_DIR)/libh3fakelog.so $(FAKE_SOS) $(FAKE_DIR)/libh3fakeframework.so \
            $(FAKE_DIR)/libh3faketriton.so $(FAKE_DIR)/libh3fakector.so \
            $(FAKE_DIR)/libh3nexta.so $(FAKE_DIR)/libh3nextb.so

fakes: $(FAKE_ALL)
.PHONY: fakes

# The Check suites: built with sanitizers, run with the shim preloaded.
UNIT_SRC := $(wildcard tests/unit/*.c)
# The parser (shim/sigfile.c) is linked in too: its tests call it directly.
$(B)/tests/check_h3shim: $(UNIT_SRC) shim/sigfile.c $(wildcard tests/unit/*.h) $(FAKE_HDR) $(FAKE_DIR)/libh3fakelog.so \
                         $(FAKE_DIR)/libh3nexta.so $(FAKE_DIR)/libh3nextb.so
	@mkdir -p $(@D)
	$(CC) $(FAKE_CFLAGS) -Itests/unit $(CHECK_CFLAGS) -o $@ $(UNIT_SRC) shim/sigfile.c \
	  -L$(FAKE_DIR) -lh3fakelog -Wl,--no-as-needed -lh3nexta -lh3nextb -Wl,--as-needed -Wl,-rpath,'$$ORIGIN/../fake' $(CHECK_LIBS) -ldl -lpthread

ASAN_RT := $(shell $(CC) -print-file-name=libasan.so)
# ASan must come first among preloaded objects; detect_leaks is off because
# fork-mode children exit with objects the fakes keep on purpose.
CHECK_ENV = ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            CK_DEFAULT_TIMEOUT=60

# The recorded H3 block trace as a replay file for the matcher's tests.
REPLAY_TRACE := tests/record/data/h3-block3-h200-torch2.11-v2.jsonl.gz
$(B)/tests/h3-block3-replay.txt: $(REPLAY_TRACE) scripts/trace_replay.py
	@mkdir -p $(@D)
	python3 scripts/trace_replay.py $(REPLAY_TRACE) -o $@
$(B)/tests/h3-block3-replay-%.txt: $(B)/tests/h3-block3-replay.txt tests/tools/replay_alias.py
	python3 tests/tools/replay_alias.py $* $< $@
ALIAS_REPLAYS := $(B)/tests/h3-block3-replay-y16-in-h.txt $(B)/tests/h3-block3-replay-swiglu-out-in-gate.txt \
                 $(B)/tests/h3-block3-replay-last-h-in-b16.txt $(B)/tests/h3-block3-replay-swiglu-out-unaligned.txt
# Another model's calls: the block stream with its kernels renamed and its
# GEMMs' output rows changed, so that nothing matches (as make bench-cpu's last row).
$(B)/tests/foreign-replay.txt: $(B)/tests/h3-block3-replay.txt
	awk '$$1 == "L" { $$2 = "X" $$2 } $$1 == "M" { $$38 = $$38 + 8 } { print }' $< > $@
ALIAS_REPLAYS += $(B)/tests/foreign-replay.txt
# One-block decodes traced on the H200 where the closures' host left-overs differ from the
# recording's: a process on cuda:1, and a second thread (tests/record/data).
$(B)/tests/h3-block1-%-replay.txt: tests/record/data/h3-block1-h200-torch2.11-%.jsonl.gz scripts/trace_replay.py
	@mkdir -p $(@D)
	python3 scripts/trace_replay.py $< -o $@
ALIAS_REPLAYS += $(B)/tests/h3-block1-cuda1-replay.txt $(B)/tests/h3-block1-thread-replay.txt
# The block as the serving pipeline runs it (serve.py --mode serving, traced on the H200 by
# tests/gpu/record_serving.sh): each request's first tile casts its weights, its later tiles do not.
$(B)/tests/h3-serving3-%-replay.txt: tests/record/data/h3-serving3-h200-torch2.11-%.jsonl.gz scripts/trace_replay.py
	@mkdir -p $(@D)
	python3 scripts/trace_replay.py $< -o $@
ALIAS_REPLAYS += $(B)/tests/h3-serving3-a-replay.txt
# The block stream with the frees PyTorch's caching allocator reports (F lines):
# where the block's code makes them, moved before the groups that made the tensors, and
# reported for a CPU device; and with the GEMMs' weight and bias casts freed after each GEMM.
$(B)/tests/h3-block3-frees-%.txt: $(B)/tests/h3-block3-replay.txt tests/tools/replay_frees.py
	python3 tests/tools/replay_frees.py $* $< $@
# The block mutated in every block by replay_mutate.py MODE (its docstring says how):
#   middle  another kernel in its middle (the learner learns it; the ops take none of it)
#   padding stale bytes beside the cats' isContiguous flags, 0 in some blocks only (learned, fused)
#   loose   stale bytes in a launch no op's range spans, the same while it is learned and
#           different in every later block (learned, matched on its identity, fused)
#   reader  a launch after the rope that reads k's FP16 norm, freed after that launch (the
#           freed-outputs rule must write what a held launch reads)
#   cast-reader  the w2 weight's cast reading silu's output, freed after that cast (the same,
#           for a launch another op claims, through a word no slot holds)
#   early   the bias casts of to_qkv and w1 reading a buffer freed before the input's cast,
#           which the allocator puts there (an op must not write that cast ahead of them)
$(B)/tests/h3-block3-mutated-%.txt: $(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py $* $< $@
ALIAS_REPLAYS += $(foreach m,middle padding loose reader cast-reader early,$(B)/tests/h3-block3-mutated-$(m).txt)
# A stream that never repeats (the learner keeps it in its fixed memory and learns nothing).
$(B)/tests/unique-replay.txt: $(B)/tests/h3-block3-replay.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py unique $< $@
ALIAS_REPLAYS += $(B)/tests/unique-replay.txt
# Another model's forward of 96 kernels in turn (every one idle, each in the thread's table).
$(B)/tests/kernels-replay.txt: $(B)/tests/h3-block3-replay.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py kernels $< $@
ALIAS_REPLAYS += $(B)/tests/kernels-replay.txt
# Then the block (a thread that stopped looking while the stream never repeated runs it idle).
$(B)/tests/unique-then-block-replay.txt: $(B)/tests/unique-replay.txt $(B)/tests/h3-block3-frees-casts.txt
	cat $^ > $@
ALIAS_REPLAYS += $(B)/tests/unique-then-block-replay.txt
# Another model's layers with a cuBLAS GEMM every 7 calls (a Llama's): they repeat, never as a group.
$(B)/tests/gapped-replay.txt: $(B)/tests/foreign-replay.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py gapped $< $@
ALIAS_REPLAYS += $(B)/tests/gapped-replay.txt
# Another model's layers with one of the block's weight casts in them, then the block.
$(B)/tests/shared-replay.txt: $(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py shared $< $@
ALIAS_REPLAYS += $(B)/tests/shared-replay.txt
# Another model's iterations with the block's first calls outside its layers, then the block.
# The same with the block right after the layers, a stack after the layers at every request, and
# islands that begin as the block does, hold more than a block, hold its first calls whole, or end
# with them after another model's; two islands with the block's first GEMM in both.
ISLAND_REPLAYS = $(patsubst %,$(B)/tests/islands%replay.txt,- -adjacent- -alternating- -preamble- -long- -whole- -suffix- \
	-shared- -shared2- -dup- -crowded-)
$(ISLAND_REPLAYS): $(B)/tests/islands%replay.txt: $(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py islands$(patsubst %-,%,$*) $< $@
ALIAS_REPLAYS += $(ISLAND_REPLAYS)
# Another model's layers with the block's first kernel in them, a wake (a new GEMM, or a followed
# island that breaks), a third model's, then the block.
REWAKE_REPLAYS = $(B)/tests/rewake-replay.txt $(B)/tests/rewake-follow-replay.txt
$(REWAKE_REPLAYS): $(B)/tests/rewake%replay.txt: $(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py rewake$(patsubst %-,%,$*) $< $@
ALIAS_REPLAYS += $(REWAKE_REPLAYS)
# A variant of the block with cuBLAS's own GEMMs, then the block; another model's layers
# at 70 prompt lengths, then the block (both learned after them).
$(B)/tests/variant-replay.txt: $(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py variant $< $@
$(B)/tests/lengths-replay.txt: $(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py lengths $< $@
$(B)/tests/lt-lengths-replay.txt: $(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py lt-lengths $< $@
ALIAS_REPLAYS += $(B)/tests/variant-replay.txt $(B)/tests/lengths-replay.txt $(B)/tests/lt-lengths-replay.txt
# The variant 20 times, then the block (the thread goes quiet before it comes), and without it.
$(B)/tests/variant-long-replay.txt $(B)/tests/variant-many-replay.txt: $(B)/tests/variant-%-replay.txt: \
		$(B)/tests/h3-block3-frees-casts.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py variant-$* $< $@
ALIAS_REPLAYS += $(B)/tests/variant-long-replay.txt $(B)/tests/variant-many-replay.txt
# Another model's layer with its first call on another stream (repeats, refused).
$(B)/tests/streams-replay.txt: $(B)/tests/foreign-replay.txt tests/tools/replay_mutate.py
	python3 tests/tools/replay_mutate.py streams $< $@
ALIAS_REPLAYS += $(B)/tests/streams-replay.txt
# Another model's calls over and over (its group refused at once; the rest never a new group).
$(B)/tests/foreign-replay-x20.txt: $(B)/tests/foreign-replay.txt
	for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do cat $<; done > $@
ALIAS_REPLAYS += $(B)/tests/foreign-replay-x20.txt
# The block, then another model's calls (weight_cache's copies exist while they run).
$(B)/tests/block-then-foreign-replay.txt: $(B)/tests/h3-block3-replay.txt $(B)/tests/foreign-replay.txt
	cat $^ > $@
ALIAS_REPLAYS += $(B)/tests/block-then-foreign-replay.txt
ALIAS_REPLAYS += $(B)/tests/h3-block3-frees-after.txt $(B)/tests/h3-block3-frees-before.txt $(B)/tests/h3-block3-frees-cpu.txt \
                 $(B)/tests/h3-block3-frees-casts.txt $(B)/tests/h3-block3-frees-moved.txt \
                 $(B)/tests/h3-block3-frees-moved-kept.txt $(B)/tests/h3-block3-frees-swiglu-moved.txt \
                 $(B)/tests/h3-block3-frees-gemm-moved.txt

check-asan: $(B)/asan/libh3shim.so $(B)/tests/check_h3shim $(FAKE_ALL) $(B)/h3sig $(B)/tests/h3-block3-replay.txt \
  $(ALIAS_REPLAYS)
	@echo "== Check suites, sanitized library ($(B)/asan/libh3shim.so)"
	$(CHECK_ENV) H3TEST_SHIM=$(B)/asan/libh3shim.so LD_PRELOAD="$(ASAN_RT) $(B)/asan/libh3shim.so" \
	  $(B)/tests/check_h3shim

check-release: $(B)/libh3shim.so $(B)/tests/check_h3shim $(FAKE_ALL) $(B)/h3sig $(B)/tests/h3-block3-replay.txt \
  $(ALIAS_REPLAYS)
	@echo "== Check suites, release library ($(B)/libh3shim.so)"
	$(CHECK_ENV) H3TEST_SHIM=$(B)/libh3shim.so LD_PRELOAD="$(ASAN_RT) $(B)/libh3shim.so" \
	  $(B)/tests/check_h3shim

# The exported dlsym must forward with a tail jump (libc reads the caller's
# return address for RTLD_NEXT), in the release and the sanitized build.
check-tailjump: $(B)/libh3shim.so $(B)/asan/libh3shim.so
	@for so in $^; do \
	  objdump -d --no-show-raw-insn $$so | awk '/<dlsym>:/{f=1;next} f&&/^$$/{exit} f' > $(B)/dlsym.s; \
	  grep -qE 'jmp +\*%r' $(B)/dlsym.s || { echo "dlsym in $$so does not tail-jump to libc:"; cat $(B)/dlsym.s; exit 1; }; \
	done
	@echo "== dlsym forwards with a tail jump"

# readelf: no CUDA library among the shim's DT_NEEDED; no version node.
check-exports: $(B)/libh3shim.so
	@! readelf -d $(B)/libh3shim.so | grep NEEDED | grep -iE 'cuda|cublas|cudnn' || { echo "libh3shim.so links a CUDA library"; exit 1; }
	@! readelf -V $(B)/libh3shim.so | grep -q 'Version definition' || { echo "libh3shim.so defines a version node"; exit 1; }
	@echo "== libh3shim.so needs no CUDA library and defines no version node"

# The signature recorder's tests (Python standard library only).
check-record:
	@echo "== scripts/record_signature.py tests"
	python3 tests/record/test_record_signature.py

# The GPU scripts' own logic (verdicts, deadlines), PyTorch stubbed.
check-scripts:
	@echo "== tests/gpu scripts' logic"
	python3 tests/scripts/test_gpu_scripts.py
	@echo "== the documents' relative links"
	python3 tests/scripts/test_doc_links.py
	@echo "== what is enabled where, against the validation reports"
	python3 tests/scripts/test_validated_table.py
	@echo "== hooks.def's property column"
	python3 tests/scripts/test_hooks_table.py
	@echo "== shim/'s layering: no call up a floor beyond tests/tools/layering-allowed.txt"
	python3 tests/scripts/test_layering.py
	python3 tests/tools/layering.py

# An installed library finds its installed signatures.
check-install: $(B)/libh3shim.so $(B)/h3sig $(B)/bench/bench_cpu
	@rm -rf $(B)/install-test
	@$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(B)/install-test >/dev/null
	@$(B)/install-test/bin/h3sig -q $(B)/install-test/share/h3shim/signatures/*.sig
	@LD_PRELOAD=$(CURDIR)/$(B)/install-test/lib/libh3shim.so H3SHIM_DEBUG=INFO H3SHIM_DEBUG_SUBSYS=INIT \
	  $(B)/bench/bench_cpu $(BENCH_DIR) cublasGemmEx 1000 2>&1 >/dev/null \
	  | grep -q "share/h3shim/signatures/.*: model minimax-h3-vae-decoder" \
	  || { echo "the installed library did not load its installed signatures"; exit 1; }
	@echo "== make install: the installed library loads the installed signatures"

check: check-exports check-tailjump check-readme check-record check-scripts check-install check-fuzz-corpus check-asan check-release

# The fuzz targets, built with the sanitizers and a plain main, over their
# corpora (make fuzz and fuzz-config run libFuzzer itself, with clang).
$(B)/fuzz-replay/%: tests/fuzz/%.c tests/fuzz/replay_main.c shim/sigfile.c shim/config.c shim/log.c $(SHIM_HDR)
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) -Wno-missing-prototypes -O1 -g $(SANITIZE) $(CUDA_CFLAGS) -Ishim -o $@ \
	  $< tests/fuzz/replay_main.c $(if $(findstring sigfile,$*),shim/sigfile.c,shim/config.c shim/log.c)

check-fuzz-corpus: $(B)/fuzz-replay/fuzz_sigfile $(B)/fuzz-replay/fuzz_config
	@echo "== the fuzz targets over their corpora"
	$(B)/fuzz-replay/fuzz_sigfile tests/fuzz/corpus/*
	$(B)/fuzz-replay/fuzz_config tests/fuzz/corpus-config/*

$(B)/envtable: tests/tools/envtable.c shim/config.def shim/ops.def
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) -Ishim -o $@ $<

env-table: $(B)/envtable
	@$(B)/envtable

# README.md must carry the table that shim/config.def generates.
check-readme: $(B)/envtable
	@$(B)/envtable > $(B)/envtable.md
	@awk '/<!-- env-table -->/{f=1;next} /<!-- \/env-table -->/{f=0} f' README.md > $(B)/envtable.readme
	@diff -u $(B)/envtable.readme $(B)/envtable.md || { echo "README.md's variable table is stale: paste \`make env-table\`"; exit 1; }
	@echo "== README.md's variable table matches shim/config.def"

# CPU overhead of the interposer per call, tracing off: the optimised fake
# stack called in a tight loop by the fake framework, with and without the
# release shim preloaded, alternating, medians (tests/tools/bench_cpu.sh).
$(B)/bench/bench_cpu: tests/tools/bench_cpu.c $(BENCH_DIR)/libh3fakeframework.so
	$(CC) $(BENCH_CFLAGS) -o $@ $< -ldl

bench-cpu: $(B)/libh3shim.so $(B)/bench/bench_cpu $(B)/tests/h3-block3-replay.txt $(B)/tests/gapped-replay.txt
	@sh tests/tools/bench_cpu.sh $(B)/bench/bench_cpu $(B)/libh3shim.so $(BENCH_DIR) $(B)/tests/h3-block3-replay.txt signatures

# Rewrites README.md's variable table from shim/config.def.
env-table-readme: $(B)/envtable
	@$(B)/envtable > $(B)/envtable.md
	@awk -v table=$(B)/envtable.md '/<!-- env-table -->/{print; while ((getline l < table) > 0) print l; skip=1; next} /<!-- \/env-table -->/{skip=0} !skip' README.md > $(B)/README.new
	@mv $(B)/README.new README.md
	@echo "README.md's variable table rewritten"
.PHONY: env-table-readme check-readme env-table
