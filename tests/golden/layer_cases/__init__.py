"""Layer golden cases, one module per layer type; see common.py and ../make_layer_golden.py."""
