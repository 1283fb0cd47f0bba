"""ONNX export (the ``onnx`` extra: ``pip install 'adaptemb[onnx]'``), one module per job.

* ``head``: a compressor's encode path alone (``OnnxExport``: ``exportable``, ``encoder(k)``,
  ``encoder_arrays``, ``export_onnx``, mixed into the public ``Compressor``);
* ``backbones``: which model (text or image), its module for export, its inputs and tokenizer;
* ``samples``: the built-in inputs exports are checked on (``SAMPLE_TEXTS``, 16 Fashion-MNIST images);
* ``storage``: a head's outputs in the storage form its code kind declares (``StorageHead``);
* ``compose``: a torch module to ONNX, and graphs joined into one;
* ``parity``: the comparison of a graph's outputs with ``encode``'s codes, its float and quantised bars,
  and the export-and-check path (``compare_codes``, ``EncoderParity``, ``OnnxParity``, ``export_checked``);
* ``quantize``: dynamic int8 quantisation of a backbone and its timing (``QuantizationReport``);
* ``sessions``: onnxruntime sessions and running a graph (``run_onnx``, ``require_onnx``).

The ONNX packages are imported inside the functions that use them: importing adaptemb never needs them.
This package re-exports nothing, so that the public ``Compressor`` can mix in ``head`` without loading the
rest. It sits below the ``Compressor``: a backbone and a fitted compressor exported as one graph, token ids or
pixels in and codes out, is ``adaptemb.encoder_export`` (``export_encoder``, ``EncoderExport``), above the api.
"""
