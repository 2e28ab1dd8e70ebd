# Thin wrapper over CMake for the README's commands.
#   make demo        build, then compare the four notification strategies
#   make test        every test: unit, conformance on ofi:tcp + ofi:shm,
#                    the same under ASan+UBSan and valgrind, the handshake
#                    fuzzer, and the suite on verbs:rxe0 in a Soft-RoCE guest
#   make test-fast   the same without the guest, sanitizers and fuzzer
#   make install     library, header, pkg-config file, CMake package, CLI
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
PREFIX     ?= /usr/local
JOBS       ?= 2
CMAKE      ?= cmake
CTEST_ARGS ?= --output-on-failure

.PHONY: all deps build demo test test-fast install bench bench-kv bench-ps bench-softroce format clean

all: build

deps:
	@scripts/install-deps

build: deps
	$(CMAKE) -S . -B $(BUILD) -DWIMM_WERROR=ON -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	$(CMAKE) --build $(BUILD) -j$(JOBS)

demo: build
	bench/demo.sh $(BUILD)

test: deps
	$(CMAKE) -S . -B $(ASAN_BUILD) -DWIMM_WERROR=ON -DWIMM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
	$(CMAKE) --build $(ASAN_BUILD) -j$(JOBS)
	CC=clang $(CMAKE) -S . -B $(FUZZ_BUILD) -DWIMM_WERROR=ON -DWIMM_FUZZ=ON
	$(CMAKE) --build $(FUZZ_BUILD) -j$(JOBS)
	$(CMAKE) -S . -B $(BUILD) -DWIMM_WERROR=ON -DCMAKE_INSTALL_PREFIX=$(PREFIX) \
		-DWIMM_ASAN_DIR=$(abspath $(ASAN_BUILD)) -DWIMM_FUZZ_DIR=$(abspath $(FUZZ_BUILD)) \
		-DWIMM_SOFTROCE=ON
	$(CMAKE) --build $(BUILD) -j$(JOBS)
	cd $(BUILD) && ctest $(CTEST_ARGS)

test-fast: deps
	$(CMAKE) -S . -B $(BUILD) -DWIMM_WERROR=ON -DWIMM_ASAN_DIR= -DWIMM_FUZZ_DIR= -DWIMM_SOFTROCE=OFF
	$(CMAKE) --build $(BUILD) -j$(JOBS)
	cd $(BUILD) && ctest $(CTEST_ARGS)

install: build
	$(CMAKE) --install $(BUILD)

# The like-for-like harness (bench/harness.py): wimm and every peer found here,
# interleaved rounds; BENCH_FULL=1 for the long curves. Results: bench/results/.
BENCH_PYTHON ?= /usr/bin/python3
bench: build
	$(BENCH_PYTHON) bench/harness.py --build $(BUILD)

# The kv slot pool against redis-server + redis-benchmark (Debian redis).
bench-kv: build
	$(BUILD)/tools/wimm kv bench -f ofi:tcp
	$(BUILD)/tools/wimm kv bench -f ofi:shm --spin

# The parameter server against torch.distributed all-reduce (gloo): Debian
# python3-torch is installed here only, for this benchmark.
bench-ps: build
	@dpkg -s python3-torch >/dev/null 2>&1 || apt-get install -y python3-torch
	WIMM_LIBRARY=$(BUILD)/libwimm.so /usr/bin/python3 bench/ps_bench.py --wimm $(BUILD)/tools/wimm
	WIMM_LIBRARY=$(BUILD)/libwimm.so /usr/bin/python3 bench/ps_pull.py -f ofi:tcp

# The same in the Soft-RoCE guest, against perftest (only WIMM_* variables
# reach the guest by themselves: the harness's are passed here). The quick
# default takes about half an hour of TCG: the guest gets an hour.
bench-softroce: build
	WIMM_SOFTROCE_TIMEOUT=$${WIMM_SOFTROCE_TIMEOUT:-3600} tests/softroce/run env "BENCH_FULL=$${BENCH_FULL:-}" "BENCH_ROUNDS=$${BENCH_ROUNDS:-5}" \
		"BENCH_NOTE=$${BENCH_NOTE:-}" $(BENCH_PYTHON) bench/harness.py --guest --build $(BUILD)

format:
	clang-format -i include/*.h include/wimm/*.h src/*.h src/*/*.[ch] src/services/*/*.[ch] \
		tools/*.[ch] tests/*/*.[ch] tests/services/*/*.[ch] bench/*.c

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
