"""The live runner: call an agent on every case, repeatedly, through the instrumentation.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""
