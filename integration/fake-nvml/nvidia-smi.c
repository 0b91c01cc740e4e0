/* The fake node's nvidia-smi (integration/src/fake_gpu.rs compiles it with gcc -static):
 * a real ELF executable holding the driver version, as graft accepts only such binaries.
 *
 * - prints `fake nvidia-smi <args>` first, and appends `<args>` to
 *   /var/log/fake-nvidia-smi.log (graft-driver runs it chrooted into the fake driver root,
 *   where tests read what it was asked; elsewhere a failure to log is ignored);
 * - `-L` and `-q` answer like the real tool for the GPUs of the fake NVML
 *   (integration/fake-nvml: same UUIDs, minors, MIG devices), listing those whose
 *   /dev/nvidia<minor> this process may open, and failing as the real tool does without
 *   /dev/nvidiactl;
 * - anything else only prints and logs, and succeeds.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DRIVER_VERSION
#define DRIVER_VERSION "580.95.05"
#endif
#define CUDA_VERSION "13.0"
#define GPU_NAME "NVIDIA H100 80GB HBM3"

static const unsigned MINORS[8] = {2, 3, 0, 1, 6, 7, 4, 5};
static const unsigned PCI_BUSES[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

/* The fake NVML's static MIG devices: parent index and profile, by MIG index. */
static const struct {
    unsigned parent;
    const char *profile;
} MIGS[] = {
    {6, "3g.40gb"}, {6, "3g.40gb"}, {7, "4g.40gb"}, {7, "2g.20gb"}, {7, "1g.10gb"},
};

/* Present, and not refused by the devices cgroup (EPERM); ENXIO, on a machine without
 * the nvidia module, still counts. */
static int usable(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno != EPERM && errno != EACCES;
}

static int gpu_visible(unsigned i) {
    char path[32];
    snprintf(path, sizeof path, "/dev/nvidia%u", MINORS[i]);
    return usable(path);
}

static void gpu_uuid(unsigned i, char *out, size_t len) {
    snprintf(out, len, "GPU-6a1f%04x-93c1-4d4e-8f7b-0c5e2a9%05x", i, i);
}

static void log_args(int argc, char **argv) {
    FILE *f = fopen("/var/log/fake-nvidia-smi.log", "a");
    if (!f) return;
    for (int i = 1; i < argc; i++) fprintf(f, "%s%s", i > 1 ? " " : "", argv[i]);
    fputc('\n', f);
    fclose(f);
}

/* The visible GPUs' NVML indices; fails like the real tool when there are none. */
static int visible(unsigned *out, unsigned *n) {
    if (!usable("/dev/nvidiactl")) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n");
        return 9;
    }
    *n = 0;
    for (unsigned i = 0; i < 8; i++)
        if (gpu_visible(i)) out[(*n)++] = i;
    if (*n == 0) {
        printf("No devices were found\n");
        return 6;
    }
    return 0;
}

static int list(void) {
    unsigned idx[8], n;
    int rc = visible(idx, &n);
    if (rc) return rc;
    for (unsigned k = 0; k < n; k++) {
        char uuid[64];
        gpu_uuid(idx[k], uuid, sizeof uuid);
        printf("GPU %u: %s (UUID: %s)\n", k, GPU_NAME, uuid);
        unsigned dev = 0;
        for (unsigned m = 0; m < sizeof MIGS / sizeof MIGS[0]; m++) {
            if (MIGS[m].parent != idx[k]) continue;
            printf("  MIG %-11s Device %2u: (UUID: MIG-0d2b%04x-51a0-5b7e-9c3d-7e11f4a%05x)\n",
                   MIGS[m].profile, dev++, m, m);
        }
    }
    return 0;
}

static int query(void) {
    unsigned idx[8], n;
    int rc = visible(idx, &n);
    if (rc) return rc;
    printf("\n==============NVSMI LOG==============\n\n");
    printf("%-42s: %s\n", "Driver Version", DRIVER_VERSION);
    printf("%-42s: %s\n\n", "CUDA Version", CUDA_VERSION);
    printf("%-42s: %u\n", "Attached GPUs", n);
    for (unsigned k = 0; k < n; k++) {
        unsigned i = idx[k];
        int mig = i >= 6;
        char uuid[64];
        gpu_uuid(i, uuid, sizeof uuid);
        printf("GPU 00000000:%02X:00.0\n", PCI_BUSES[i]);
        printf("    %-38s: %s\n", "Product Name", GPU_NAME);
        printf("    %-38s: %s\n", "Product Brand", "NVIDIA");
        printf("    %-38s: %s\n", "Product Architecture", "Hopper");
        printf("    MIG Mode\n");
        printf("        %-34s: %s\n", "Current", mig ? "Enabled" : "Disabled");
        printf("        %-34s: %s\n", "Pending", mig ? "Enabled" : "Disabled");
        printf("    %-38s: %s\n", "GPU UUID", uuid);
        printf("    %-38s: %u\n", "Minor Number", MINORS[i]);
        printf("    FB Memory Usage\n");
        printf("        %-34s: %s\n", "Total", "81559 MiB");
        printf("        %-34s: %s\n", "Reserved", "512 MiB");
        printf("        %-34s: %s\n", "Used", "0 MiB");
        printf("        %-34s: %s\n", "Free", "81047 MiB");
    }
    return 0;
}

int main(int argc, char **argv) {
    printf("fake nvidia-smi ");
    for (int i = 1; i < argc; i++) printf("%s%s", i > 1 ? " " : "", argv[i]);
    printf("\n");
    log_args(argc, argv);
    if (argc == 2 && strcmp(argv[1], "-L") == 0) return list();
    if (argc == 2 && strcmp(argv[1], "-q") == 0) return query();
    return 0;
}
