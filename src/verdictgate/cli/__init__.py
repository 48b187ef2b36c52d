"""The command line: click commands that parse, call the library and render.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""
