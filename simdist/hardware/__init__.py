"""The hardware: hosts and devices, device profiles and the roofline, the device
mesh, step-time variability and the faults (stragglers, failures) devices suffer.
"""
