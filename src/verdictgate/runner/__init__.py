"""The live runner: call an agent on every case, repeatedly, through the instrumentation."""
