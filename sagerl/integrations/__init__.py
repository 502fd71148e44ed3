"""Engine integrations other than the TRL adapter (:mod:`sagerl.train`).

- :mod:`sagerl.integrations.verl`: SAGE as a verl plugin (its own environment: ``pip install 'sagerl[verl]'``).

Each integration calls :mod:`sagerl.objective` for the loss, so one function defines SAGE for every engine.
"""
