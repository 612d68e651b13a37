// Package bench compares this project's one-shot build against the reference
// pipelines on the same image, machine and run (SPEC §7): the upstream
// dockerless pipeline (skopeo copy + umoci unpack + mkfs.ext4 -d + e2fsck +
// resize2fs -M) and a plain flatten + tar -x + mkfs.ext4 -d. It pushes a
// multi-layer image of about 550 MB to the registry on loopback
// (CUBE_TEST_REGISTRY) and prints wall times and ratios. Run it with
// `make bench`; it needs root for umoci and mkfs device nodes.
package bench
