# Thin aliases: every recipe is one build.py call. TARGET defaults to the offline-buildable runtime.
TARGET ?= hip-runtime
PYTHON ?= python3

.PHONY: build test render lint list check
build:
	$(PYTHON) build.py build --target $(TARGET)
test:
	$(PYTHON) build.py test --target $(TARGET)
render:
	$(PYTHON) build.py render
lint:
	$(PYTHON) build.py render --check
list:
	$(PYTHON) build.py list
