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

test: setup lint test-rust test-python

# Formatting and lints are part of the suite: rustfmt, clippy (warnings are errors), ruff.
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	.venv/bin/ruff check python tests scripts

test-rust:
	cargo test --workspace --locked

test-python:
	.venv/bin/python -m pytest -q tests

bench: setup
	cargo run --release --locked -p ssdlab-bench
	.venv/bin/python scripts/bench-nbd.py

docs: setup
	.venv/bin/ssdlab config keys > docs/CONFIG.md

clean:
	rm -rf target .venv reports
