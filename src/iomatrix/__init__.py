"""iomatrix: a storage-performance lab for KVM/QEMU hosts."""

__version__ = "0.1.0"
