"""Networks going in and out: the dict format, the flat ONNX file, export, save and load.

    network_dict.py    any standard Transformer as a dict of arrays: format, checks, hash
    network_apply.py   its NumPy reference evaluation (apply, gelu, layer_norm, cast)
    project_import.py  the project's modules.Network and realized g as that dict's Net
    flat_onnx.py       that dict as a flat ONNX graph (write, read)
    export_onnx.py     the project's realized networks as ONNX files
    saved_network.py   a certified network with its certificate in one file (save, load,
                       recheck), hashes checked on load
    exact_json.py      JSON in which every number reads back exact (saved_network's manifest)
"""
