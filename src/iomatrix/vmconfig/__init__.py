"""A VM's disk configuration in each tool's own language: one module per tool holds that tool's
snippet writer and its ``--current`` reader, so a format's parse and write sit together (issue 36).

  * `config`: `DiskConfig` (one configuration), `Snippet`/`SnippetSet`, what every writer shares;
  * `reading`: `CurrentConfig` (what a reader returns, the user's `ExistingDisk`), what every reader
    shares;
  * `libvirt`, `qemu`, `proxmox`: writer and reader of that tool; `nova`: written only; `plain`:
    ``cache=none,…``;
  * `network`: where a network disk lives (iSCSI, NFS, RBD), written and read; `network_snippets`:
    the network disks' snippets (tgt, ceph.conf, the storage definitions).

The entry points stay outside: `iomatrix.snippets.snippets_for` puts a configuration's snippets
together (and changes a disk the user has), `iomatrix.current.parse_current` picks the reader for
what the user gave."""
