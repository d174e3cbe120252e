# Two commands for a fresh Debian machine:
#   make demo   set up, then run the main job (quick reproductions with their reports)
#   make test   set up, then run the whole suite (cargo tests + pytest)
.PHONY: setup demo test lint test-rust test-python bench docs clean

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/ssdlab reproduce gc-policies --quick
	.venv/bin/ssdlab reproduce fdp-cache --quick
	.venv/bin/ssdlab reproduce vm-baseline --quick
	.venv/bin/ssdlab reproduce flashblox --quick
	.venv/bin/ssdlab reproduce flac --quick
	.venv/bin/ssdlab reproduce lsm-deletion --quick
	.venv/bin/ssdlab reproduce dpuswap --quick
	.venv/bin/ssdlab reproduce uio-kv --quick
	.venv/bin/ssdlab spi campaign experiments/spi-nor/campaign.toml --cuts 5000 --out reports/spi-nor/campaign
	.venv/bin/ssdlab reproduce --headline | tee reports/headline.md

test: setup lint test-rust test-python

# Formatting, lints and types are part of the suite: rustfmt, clippy (warnings are errors), ruff,
# mypy on the Python package (its settings in pyproject.toml).
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	.venv/bin/ruff check python tests scripts
	.venv/bin/mypy

# The Rust tests run with a temp directory of their own, which must be empty afterwards (the
# Python tests check theirs in tests/conftest.py).
test-rust:
	@t=$$(mktemp -d); TMPDIR=$$t cargo test --workspace --locked; rc=$$?; left=$$(ls -A $$t); rm -rf $$t; \
	if [ -n "$$left" ]; then echo "cargo tests left files in the temp directory: $$left" >&2; exit 1; fi; exit $$rc

# Under `make test` a test skipped for a missing tool is a failure (setup installs them all).
# Two workers (pytest-xdist; tests spread one by one, those sharing a file's module fixture kept
# together: tests/conftest.py), then the tests marked serial, which use machine-wide resources,
# one at a time.
test-python:
	SSDLAB_REQUIRE_TOOLS=1 .venv/bin/python -m pytest -q --durations=15 -n 2 --dist loadgroup -m "not serial" tests
	SSDLAB_REQUIRE_TOOLS=1 .venv/bin/python -m pytest -q -m serial tests

bench: setup
	cargo run --release --locked -p ssdlab-bench
	.venv/bin/python scripts/bench-nbd.py
	.venv/bin/python scripts/bench-flac.py
	.venv/bin/python scripts/bench-resp.py
	.venv/bin/python scripts/bench-uio.py

# CONFIG.md from the core's keys; README's headline table and the pages' claims tables from the
# reports under reports/ (run `make demo` first).
docs: setup
	.venv/bin/ssdlab config keys > docs/CONFIG.md
	.venv/bin/ssdlab reproduce --headline --write $$(grep -l -e '<!-- headline' -e '<!-- claims of' README.md docs/*.md docs/case-studies/*.md)

clean:
	rm -rf target .venv reports
