# Headwater: the two commands are `make run` and `make test`; both install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# The JVM parts (Apache Kafka for the dev stack and tests, Spark's Kafka connector), pinned
# in jvm/*/pom.xml and copied from Maven Central once; runs after that work offline.
JARS   := $(VENV)/jvm
JVM_STAMP := $(JARS)/.installed-stamp
MVN    ?= mvn
ARGS   ?=

.PHONY: install run test test-slow test-load test-cluster test-images images cluster test-k8s lint protos docs descriptors baseline bench constraints clean

# '.[dev]' is everything (every part's extra) plus the test and lint tools; ./dev is the
# dev tooling (headwater-dev: the dev stack, the benchmarks), kept out of the headwater
# wheel. constraints.txt pins the versions that were tested behind the pyprojects' ranges.
$(STAMP): pyproject.toml dev/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]' -e ./dev
	touch $(STAMP)

# The enricher's keyed-state operator (jvm/enricher-state) is built from source: its jar,
# with classes generated from proto/, goes to $(JARS)/enricher-state/. Its JUnit tests run
# here too, which also fills Maven's cache with what `mvn -o test` needs later (the suite's
# tests/enricher/test_jvm_unit.py runs them offline).
STATE_SOURCES := $(shell find jvm/enricher-state/src proto -name '*.java' -o -name '*.proto' 2>/dev/null)

$(JVM_STAMP): jvm/kafka-broker/pom.xml jvm/spark-kafka/pom.xml jvm/enricher-state/pom.xml $(STATE_SOURCES) | $(STAMP)
	@command -v java >/dev/null || { echo "Java 17 is required (Apache Kafka, Spark)" >&2; exit 1; }
	@command -v $(MVN) >/dev/null || { echo "Maven (mvn) is required to fetch the Kafka and Spark jars" >&2; exit 1; }
	rm -rf $(JARS)
	for name in kafka-broker spark-kafka; do \
	  $(MVN) -q -B -ntp -f jvm/$$name/pom.xml dependency:copy-dependencies -Djars.dir=$(abspath $(JARS))/$$name || exit 1; \
	done
	$(MVN) -q -B -ntp -f jvm/enricher-state/pom.xml package -Djars.dir=$(abspath $(JARS))/enricher-state
	touch $(JVM_STAMP)

# The enricher benchmark's JVM floor (dev/jvm/bench-floor, dev tooling: never in the enricher's
# jar or image), compiled against the operator's jar above into $(JARS)/bench-floor/.
BENCH_FLOOR_STAMP := $(JARS)/bench-floor/.installed-stamp
BENCH_FLOOR_SOURCES := $(shell find dev/jvm/bench-floor/src -name '*.java' 2>/dev/null)

$(BENCH_FLOOR_STAMP): dev/jvm/bench-floor/pom.xml $(BENCH_FLOOR_SOURCES) $(JVM_STAMP)
	$(MVN) -q -B -ntp -f dev/jvm/bench-floor/pom.xml package -Djars.dir=$(abspath $(JARS))/bench-floor \
	  -Denricher.state.jar=$(abspath $(JARS))/enricher-state/headwater-enricher-state.jar
	touch $(BENCH_FLOOR_STAMP)

install: $(STAMP) $(JVM_STAMP) $(BENCH_FLOOR_STAMP) ## create .venv, install Headwater, its dev tooling (dev/) and the jars

run: $(STAMP) $(JVM_STAMP) ## the whole pipeline on the embedded broker with a simulated fleet
	$(BIN)/headwater devstack run $(ARGS)

test: $(STAMP) $(JVM_STAMP) $(BENCH_FLOOR_STAMP) ## the whole test suite against a real broker and a local Spark
	$(BIN)/pytest $(ARGS)

test-slow: $(STAMP) $(JVM_STAMP) $(BENCH_FLOOR_STAMP) ## the suite on a machine made ~2x slower, launched with SIGINT/SIGHUP ignored and no terminal
	scripts/test_slow.sh

images: $(STAMP) ## build the images (ingest, enricher, gateway) with podman (bases made with mmdebstrap without a registry)
	$(BIN)/python scripts/images.py $(ARGS)

test-cluster: $(STAMP) $(JVM_STAMP) ## the broker fault tests on a three-broker cluster (marker cluster)
	$(BIN)/pytest -m cluster $(ARGS)

test-load: $(STAMP) $(JVM_STAMP) ## the full-size loads whose smaller twins are in the suite (marker load)
	$(BIN)/pytest -m load $(ARGS)

test-images: $(STAMP) $(JVM_STAMP) ## build the images, run them against a broker (marker images)
	$(BIN)/pytest -m images tests/images $(ARGS)

# A one-node Kubernetes for the `k8s` tests: Debian packages when missing, then Kubernetes,
# etcd, helm and CoreDNS built once from pinned Go modules into .cluster/ (docs/deploy.md).
cluster: $(STAMP) ## build the one-machine Kubernetes cluster's binaries (once; minutes)
	$(BIN)/python scripts/cluster/build.py $(ARGS)

test-k8s: $(STAMP) $(JVM_STAMP) ## the chart on a real one-node cluster (marker k8s; builds it first)
	$(BIN)/python scripts/cluster/build.py
	$(BIN)/pytest -m k8s tests/k8s $(ARGS)

lint: $(STAMP) ## ruff, formatting, buf lint and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/buf lint
	$(BIN)/mypy services src/headwater dev/headwater_dev

protos: $(STAMP) ## regenerate src/headwater/proto from proto/
	$(BIN)/python scripts/generate_protos.py

docs: $(STAMP) ## rewrite the settings tables in the docs from the settings declarations
	$(BIN)/python scripts/settings_docs.py

descriptors: $(STAMP) ## dist/headwater.binpb: the descriptor set, to decode every topic in any language
	mkdir -p dist
	$(BIN)/python -c "import sys; from headwater.contracts import descriptor_set; sys.stdout.buffer.write(descriptor_set())" > dist/headwater.binpb

baseline: $(STAMP) ## move the contract baseline to proto/ as it is now (on a release only)
	$(BIN)/buf build --exclude-source-info -o proto/baseline/headwater-v1.binpb

bench: $(STAMP) $(JVM_STAMP) ## the ingest benchmark (numbers go to docs/benchmarks.md)
	$(BIN)/headwater bench ingest $(ARGS)

constraints: | $(STAMP) ## rewrite constraints.txt from this venv's versions (after changing a range)
	$(BIN)/python scripts/constraints.py

clean:
	rm -rf $(VENV) .devstack .pytest_cache build *.egg-info dev/*.egg-info jvm/enricher-state/target
