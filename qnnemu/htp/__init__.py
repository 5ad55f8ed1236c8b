"""The HTP device model: SoC table, HTP configs, the prepare pipeline (VTCM planning,
scheduling, spill/fill), the cost model, the performance infrastructure and profiling data.
Pure Python: nothing here imports cffi."""
