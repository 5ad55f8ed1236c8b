"""The LPAI backend model (LPAI/QnnLpai*.h; QNN LPAI Memory Allocations / QNN LPAI Memory
Management): the emulated eNPU (``device``), the LPAI custom configs and properties with their
rules (``settings``) and the memory planner of scratch, persistent and IO memory (``memory``).

libQnnLpaiEmu.so is one more table on the backend's Python core (qnnemu/abi/lpai_api.py); this
package holds what is LPAI-specific and knows nothing of C structs.  docs/lpai.md.
"""
