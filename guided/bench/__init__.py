"""The harnesses behind ``guided bench``: MaskBench's runner, the JSON Schema Test Suite, the peer
engines they drive side by side, and the server under concurrent clients."""
