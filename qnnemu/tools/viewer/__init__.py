"""The profile viewer's renderers (qnnemu-profile-viewer): optrace documents -> chrometrace
(:mod:`.chrometrace`) and the QHAS HTML report (:mod:`.qhas`), QNN HTP backend documentation,
"QNN HTP Optrace Profiling" and "QNN HTP Analysis Summary (QHAS)".
"""
