# Two commands do all the set-up on a fresh machine (see README):
#   make run    install into .venv and show this machine's GPUs (`vram status`)
#   make test   install into .venv with the test tools and run the whole test suite
# While working: `make test-fast` runs everything but the tests marked slow (under a minute).
# `make test-user` runs the tests whose result depends on who runs them (marked `uid`): CI runs the
# whole suite as root, then these as an ordinary user.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast test-user test-zh lint bench clean install i18n compiled

# The tests run in parallel (pytest-xdist), one worker per core and two more: a worker waiting on a
# server, a browser, a terminal or a timeout leaves its core to an extra one. On 2 cores the whole
# suite took 665 s with 2 workers and 463 s with 3; later, one session, one tree: 366 s with 3,
# 314 s with 4, 313 s with 5, for about the same CPU time (9m10-9m30 user+sys; with 3 workers the
# cores stood idle a quarter of the time). Tests that must not run at the same time as each other
# share an xdist_group (tests/conftest.py), which loadgroup keeps on one worker. `make test XDIST=`
# runs them one at a time, in this process.
WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 2 )))
XDIST ?= -n $(WORKERS) --dist loadgroup

# The suite starts vram thousands of times, each a new Python: with vramkit's modules compiled (.pyc) a
# start takes about half the CPU. Python writes them as it imports, unless PYTHONDONTWRITEBYTECODE is
# set (some machines and CI images set it; the vram processes the tests start always have it), and then
# every one of those starts compiled vramkit again. So the test targets compile them first (`compiled`)
# and run pytest without it, so that pytest also keeps its rewritten test modules from one run to the next.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The whole command line: the core with the live view (tui) and the exporter (serve) extras.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[tui,serve]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(VENV)/.installed $@

# vram exits 1 when it cannot show this machine (no NVIDIA driver: it says so in one line and
# how to try the simulated server instead, or offers it on a terminal). The set-up `make run`
# does has succeeded by then, and make's own "make: *** [Makefile:NN: run] Error 1" would only
# repeat vram's line as noise, so exit 1 is make's success here. Every other failure still
# fails make, with its line: bad ARGS (vram exits 2), Ctrl-C (130), a failed install (above).
run: $(VENV)/.installed
	@echo '$(BIN)/vram status $(subst ','\'',$(ARGS))'
	@$(BIN)/vram status $(ARGS) || { rc=$$?; [ $$rc -eq 1 ] || exit $$rc; }

compiled: $(VENV)/.installed-test
	$(BIN)/python -m compileall -q src/vramkit

test: compiled
	$(PYTEST) -q $(XDIST)

test-fast: compiled
	$(PYTEST) -q $(XDIST) -m "not slow"

test-user: compiled
	$(PYTEST) -q $(XDIST) -m uid

# The suite pins English (tests/conftest.py sets VRAM_LANG=en), so it passes under any locale. This
# subset runs under a Chinese one, a quick check while working (CI runs the whole suite under it): the
# tests of the Chinese output, the docs' console examples (English, and zh_CN for *.zh_CN.md), the
# help, the error lines, the config.
# LANG, with LC_ALL and LC_MESSAGES unset (either would decide first): a LC_ALL naming a locale the
# machine has not generated makes bash warn on stderr.
ZH_TESTS := tests/test_i18n*.py tests/e2e/test_i18n*.py tests/docs/test_docs_examples.py tests/test_cli_help.py \
	tests/test_flags.py tests/test_cli_output_errors.py tests/test_config.py tests/test_render_layout.py
test-zh: compiled
	env -u LC_ALL -u LC_MESSAGES LANG=zh_CN.UTF-8 LANGUAGE=zh_CN:zh $(PYTEST) -q $(XDIST) $(ZH_TESTS)

# The translations: extract every marked message, update each catalog (src/vramkit/locale/*/LC_MESSAGES/
# vramkit.po), compile its .mo. After changing a message; then translate what it says is untranslated.
i18n: $(VENV)/.installed-test
	$(BIN)/python scripts/i18n.py

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks scripts

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_snapshot.py
	$(BIN)/python benchmarks/bench_status.py
	$(BIN)/python benchmarks/bench_help.py
	$(BIN)/python benchmarks/bench_doctor.py

# For admins: the system-wide install (README, "For admins"), as root: sudo make install
install:
	sh scripts/install-system.sh $(if $(DESTDIR),--destdir $(DESTDIR)) $(INSTALL_ARGS)

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
