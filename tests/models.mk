# Test models: each converted from ../shared/testdata by build/tools/convert.
# (filled in by the converter work; `test-models` is the list the tests need)
test-models:
