# Thin aliases: every recipe is one build.py call. TARGET defaults to the offline-buildable runtime.
TARGET ?= hip-runtime
PYTHON ?= python3

REGISTRY ?= 127.0.0.1:5000
OUT ?= context/$(TARGET)

.PHONY: build test render lint list push pull doctor clean context
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
push:
	$(PYTHON) build.py push --target $(TARGET) --registry $(REGISTRY)
pull:
	$(PYTHON) build.py pull --target $(TARGET)
doctor:
	$(PYTHON) build.py doctor
clean:
	$(PYTHON) build.py clean

context:
	$(PYTHON) build.py context --target $(TARGET) --out $(OUT)
