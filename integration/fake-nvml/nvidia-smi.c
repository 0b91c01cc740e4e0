/* The fake node's nvidia-smi (integration/src/fake_gpu.rs compiles it with gcc -static):
 * a real ELF executable holding the driver version, as graft accepts only such binaries.
 * It takes the argument forms graft and its tests use, as nvidia-smi(1) documents them
 * (NVIDIA's "nvidia-smi" manual, docs.nvidia.com/deploy/nvidia-smi), and fails on anything
 * else, so that a test notices when graft asks for something new:
 *
 * - every run prints `fake nvidia-smi <args>` first, and appends `<args>` to
 *   /var/log/fake-nvidia-smi.log (graft-driver runs it chrooted into the fake driver root,
 *   where tests read what it was asked; elsewhere a failure to log is ignored);
 * - `-L` / `--list-gpus` and `-q` / `--query` (with `-i` / `--id`: that GPU only) answer like
 *   the real tool for the GPUs of the fake NVML (integration/fake-nvml: same UUIDs, minors,
 *   MIG devices), listing those whose /dev/nvidia<minor> this process may open, and failing
 *   as the real tool does without /dev/nvidiactl ("NVIDIA-SMI has failed because it couldn't
 *   communicate with the NVIDIA driver", return code 9: "NVIDIA driver is not loaded");
 *   `-q` shows "Persistence Mode" ("Enabled" or "Disabled", GPU ATTRIBUTES);
 * - `-i <id>`: "the GPU's 0-based index in the natural enumeration returned by the driver,
 *   [...] the GPU's UUID, or the GPU's PCI bus ID (as domain:bus:device.function in hex)"
 *   (board serial numbers: the fake GPUs have none); no such GPU prints "No devices were
 *   found" and returns 6 ("A query to find an object was unsuccessful");
 * - `[-i <id>] -pm <0|DISABLED|1|ENABLED>` (`--persistence-mode=`): "Set the persistence
 *   mode for the target GPUs [...] Requires root. Will impact all GPUs unless a single GPU is
 *   specified using the -i argument" - written to the fake NVML's persistence state
 *   (integration/fake-nvml/src/persistence.rs: /usr/lib/x86_64-linux-gnu/fake-nvml-persistence
 *   here, the same file the library finds beside itself), with the output NVIDIA's Driver
 *   Persistence guide shows ("Enabled persistence mode for GPU <target gpu>." then
 *   "All done.");
 * - `[-i <id>] -c <0|DEFAULT|2|PROHIBITED|3|EXCLUSIVE_PROCESS>` (`--compute-mode=`): "Set
 *   the compute mode for the target GPUs [...] Requires root" (1/EXCLUSIVE_THREAD is
 *   deprecated and refused);
 * - `compute-policy [-i <id>] --set-timeslice <0-3>` (`--set-timeslice=`), the timeslice
 *   NVIDIA's DRA driver sets the same way (0 default, 1 short, 2 medium, 3 long);
 * - settings need root: otherwise "Insufficient Permissions" and return code 4 ("The current
 *   user does not have permission to access this device or perform this operation"). The
 *   settings do not check /dev/nvidiactl: graft runs them chrooted into the driver root,
 *   whose /dev the fake node leaves empty;
 * - an option it does not know: "ERROR: Option <opt> is not recognized. Please run
 *   'nvidia-smi -h'." and return code 2 ("A supplied argument or flag is invalid"); a known
 *   option with a missing or bad value, or options that do not go together (or a documented
 *   form this fake does not implement): "Invalid combination of input arguments. Please run
 *   'nvidia-smi -h' for help." and return code 2 (the messages users report from the real
 *   tool). Messages go to stdout, as the real tool's do.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DRIVER_VERSION
#define DRIVER_VERSION "580.95.05"
#endif
#define CUDA_VERSION "13.0"
#define GPU_NAME "NVIDIA H100 80GB HBM3"
#define PERSISTENCE_FILE "/usr/lib/x86_64-linux-gnu/fake-nvml-persistence"
#define GPUS 8

static const unsigned MINORS[GPUS] = {2, 3, 0, 1, 6, 7, 4, 5};
static const unsigned PCI_BUSES[GPUS] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

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

static void bus_id(unsigned i, char *out, size_t len) {
    snprintf(out, len, "00000000:%02X:00.0", PCI_BUSES[i]);
}

static void log_args(int argc, char **argv) {
    FILE *f = fopen("/var/log/fake-nvidia-smi.log", "a");
    if (!f) return;
    for (int i = 1; i < argc; i++) fprintf(f, "%s%s", i > 1 ? " " : "", argv[i]);
    fputc('\n', f);
    fclose(f);
}

static int unrecognized(const char *opt) {
    printf("ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n", opt);
    return 2;
}

static int invalid(void) {
    printf("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
    return 2;
}

/* The NVML index `id` names (index, UUID or PCI bus id), or -1. */
static int find_gpu(const char *id) {
    char *end;
    if (isdigit((unsigned char)id[0]) && !strchr(id, ':')) {
        long n = strtol(id, &end, 10);
        return (*end == 0 && n >= 0 && n < GPUS) ? (int)n : -1;
    }
    for (unsigned i = 0; i < GPUS; i++) {
        char uuid[64];
        gpu_uuid(i, uuid, sizeof uuid);
        if (strcmp(id, uuid) == 0) return (int)i;
    }
    unsigned domain, bus, dev, fn;
    int used = 0;
    if (sscanf(id, "%x:%x:%x.%x%n", &domain, &bus, &dev, &fn, &used) == 4 && id[used] == 0) {
        for (unsigned i = 0; i < GPUS; i++)
            if (domain == 0 && bus == PCI_BUSES[i] && dev == 0 && fn == 0) return (int)i;
    }
    return -1;
}

/* The fake NVML's persistence modes (see integration/fake-nvml/src/persistence.rs): all on
 * without the file. Returns 0, or -1 with the reason printed. */
static int read_modes(int fd, int modes[GPUS]) {
    char buf[65536];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) return -1;
    buf[n] = 0;
    for (unsigned i = 0; i < GPUS; i++) modes[i] = 1;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        unsigned gpu;
        char mode[16], extra[2];
        int got = sscanf(line, "%u %15s %1s", &gpu, mode, extra);
        if (got <= 0) continue;
        if (got != 2 || gpu >= GPUS) return -1;
        if (strcmp(mode, "enabled") == 0) modes[gpu] = 1;
        else if (strcmp(mode, "disabled") == 0) modes[gpu] = 0;
        else return -1;
    }
    return 0;
}

static int load_modes(int modes[GPUS]) {
    for (unsigned i = 0; i < GPUS; i++) modes[i] = 1;
    int fd = open(PERSISTENCE_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    int rc = (flock(fd, LOCK_SH) == 0) ? read_modes(fd, modes) : -1;
    close(fd);
    return rc;
}

/* Sets the mode of the GPUs in `targets` (a bit each), in place under an exclusive lock. */
static int store_modes(unsigned targets, int on) {
    int fd = open(PERSISTENCE_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int modes[GPUS];
    int rc = -1;
    if (flock(fd, LOCK_EX) == 0 && read_modes(fd, modes) == 0) {
        char text[512];
        size_t len = (size_t)snprintf(text, sizeof text, "# fake NVML persistence mode\n");
        for (unsigned i = 0; i < GPUS; i++) {
            if (targets & (1u << i)) modes[i] = on;
            len += (size_t)snprintf(text + len, sizeof text - len, "%u %s\n", i,
                                    modes[i] ? "enabled" : "disabled");
        }
        if (ftruncate(fd, 0) == 0 && pwrite(fd, text, len, 0) == (ssize_t)len) rc = 0;
    }
    close(fd);
    return rc;
}

/* The visible GPUs' NVML indices; fails like the real tool when there are none. */
static int visible(unsigned *out, unsigned *n) {
    if (!usable("/dev/nvidiactl")) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n");
        return 9;
    }
    *n = 0;
    for (unsigned i = 0; i < GPUS; i++)
        if (gpu_visible(i)) out[(*n)++] = i;
    if (*n == 0) {
        printf("No devices were found\n");
        return 6;
    }
    return 0;
}

static int list(void) {
    unsigned idx[GPUS], n;
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

/* `only`: an NVML index, or -1 for every visible GPU. */
static int query(int only) {
    unsigned idx[GPUS], n;
    int rc = visible(idx, &n);
    if (rc) return rc;
    if (only >= 0) {
        unsigned k = 0;
        while (k < n && idx[k] != (unsigned)only) k++;
        if (k == n) {
            printf("No devices were found\n");
            return 6;
        }
        idx[0] = (unsigned)only;
        n = 1;
    }
    int modes[GPUS];
    if (load_modes(modes) != 0) {
        printf("Unable to read the persistence mode state %s\n", PERSISTENCE_FILE);
        return 255;
    }
    printf("\n==============NVSMI LOG==============\n\n");
    printf("%-42s: %s\n", "Driver Version", DRIVER_VERSION);
    printf("%-42s: %s\n\n", "CUDA Version", CUDA_VERSION);
    printf("%-42s: %u\n", "Attached GPUs", n);
    for (unsigned k = 0; k < n; k++) {
        unsigned i = idx[k];
        int mig = i >= 6;
        char uuid[64], bus[32];
        gpu_uuid(i, uuid, sizeof uuid);
        bus_id(i, bus, sizeof bus);
        printf("GPU %s\n", bus);
        printf("    %-38s: %s\n", "Product Name", GPU_NAME);
        printf("    %-38s: %s\n", "Product Brand", "NVIDIA");
        printf("    %-38s: %s\n", "Product Architecture", "Hopper");
        printf("    %-38s: %s\n", "Persistence Mode", modes[i] ? "Enabled" : "Disabled");
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

/* A setting's targets, a bit each: one GPU, or all of them. */
static unsigned targets_of(int only) { return only >= 0 ? 1u << only : (1u << GPUS) - 1; }

/* Prints `<what> for GPU <bus id><end>` for each target, and `done` after them. */
static int report(unsigned targets, const char *what, const char *end, const char *done) {
    for (unsigned i = 0; i < GPUS; i++) {
        if (!(targets & (1u << i))) continue;
        char bus[32];
        bus_id(i, bus, sizeof bus);
        printf("%s for GPU %s%s\n", what, bus, end);
    }
    if (done) printf("%s\n", done);
    return 0;
}

/* A setting needs root, as the real tool's do. */
static int insufficient(const char *what, unsigned targets) {
    char unable[64];
    snprintf(unable, sizeof unable, "Unable to set %s", what);
    report(targets, unable, ": Insufficient Permissions",
           "Terminating early due to previous errors.");
    return 4;
}

static int set_persistence(int only, const char *value) {
    int on;
    if (strcmp(value, "0") == 0 || strcasecmp(value, "DISABLED") == 0) on = 0;
    else if (strcmp(value, "1") == 0 || strcasecmp(value, "ENABLED") == 0) on = 1;
    else return invalid();
    unsigned targets = targets_of(only);
    if (geteuid() != 0) return insufficient("persistence mode", targets);
    if (store_modes(targets, on) != 0) {
        printf("Unable to write the persistence mode state %s: %s\n", PERSISTENCE_FILE,
               strerror(errno));
        return 255;
    }
    return report(targets, on ? "Enabled persistence mode" : "Disabled persistence mode", ".",
                  "All done.");
}

static int set_compute_mode(int only, const char *value) {
    static const char *const NAMES[] = {"DEFAULT", NULL, "PROHIBITED", "EXCLUSIVE_PROCESS"};
    int mode = -1;
    for (int m = 0; m < 4; m++) {
        char num[2] = {(char)('0' + m), 0};
        if (NAMES[m] && (strcmp(value, num) == 0 || strcasecmp(value, NAMES[m]) == 0)) mode = m;
    }
    if (mode < 0) return invalid();
    unsigned targets = targets_of(only);
    if (geteuid() != 0) return insufficient("compute mode", targets);
    char set[64];
    snprintf(set, sizeof set, "Set compute mode to %s", NAMES[mode]);
    return report(targets, set, ".", "All done.");
}

static int set_timeslice(int only, const char *value) {
    if (strlen(value) != 1 || value[0] < '0' || value[0] > '3') return invalid();
    unsigned targets = targets_of(only);
    if (geteuid() != 0) return insufficient("the timeslice", targets);
    char set[32];
    snprintf(set, sizeof set, "Set timeslice to %s", value);
    return report(targets, set, ".", NULL);
}

/* `--name=value` or `<short>|--name value`: the value, or NULL when argv[*k] is not this
 * option; `*missing` is set when the option has no value. */
static const char *option(int argc, char **argv, int *k, const char *shrt, const char *lng,
                          int *missing) {
    const char *a = argv[*k];
    size_t n = strlen(lng);
    if (strncmp(a, lng, n) == 0 && a[n] == '=') return a + n + 1;
    if ((shrt && strcmp(a, shrt) == 0) || strcmp(a, lng) == 0) {
        if (*k + 1 >= argc) {
            *missing = 1;
            return NULL;
        }
        return argv[++*k];
    }
    return NULL;
}

int main(int argc, char **argv) {
    printf("fake nvidia-smi ");
    for (int i = 1; i < argc; i++) printf("%s%s", i > 1 ? " " : "", argv[i]);
    printf("\n");
    log_args(argc, argv);

    int policy = argc > 1 && strcmp(argv[1], "compute-policy") == 0;
    int list_gpus = 0, query_gpus = 0, actions = 0, missing = 0;
    const char *id = NULL, *pm = NULL, *cm = NULL, *slice = NULL, *v;
    for (int k = policy ? 2 : 1; k < argc; k++) {
        const char *a = argv[k];
        if ((v = option(argc, argv, &k, "-i", "--id", &missing))) {
            if (id) return invalid();
            id = v;
        } else if (missing) {
            return invalid();
        } else if (policy) {
            if ((v = option(argc, argv, &k, NULL, "--set-timeslice", &missing))) {
                slice = v;
                actions++;
            } else if (missing) {
                return invalid();
            } else {
                return unrecognized(a);
            }
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (argc != 2) return invalid();
            printf("nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...\n"
                   "    -L, -q, -i, -pm, -c; compute-policy -i --set-timeslice "
                   "(the fake implements only these)\n");
            return 0;
        } else if (strcmp(a, "-L") == 0 || strcmp(a, "--list-gpus") == 0) {
            list_gpus = 1;
            actions++;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--query") == 0) {
            query_gpus = 1;
            actions++;
        } else if ((v = option(argc, argv, &k, "-pm", "--persistence-mode", &missing))) {
            pm = v;
            actions++;
        } else if ((v = option(argc, argv, &k, "-c", "--compute-mode", &missing))) {
            cm = v;
            actions++;
        } else if (missing) {
            return invalid();
        } else {
            return unrecognized(a);
        }
    }
    /* One thing at a time: the forms graft uses. A bare call (the summary table) is a real
     * form this fake does not implement. */
    if (actions != 1 || (list_gpus && id)) return invalid();
    int only = -1;
    if (id) {
        only = find_gpu(id);
        if (only < 0) {
            printf("No devices were found\n");
            return 6;
        }
    }
    if (list_gpus) return list();
    if (query_gpus) return query(only);
    if (pm) return set_persistence(only, pm);
    if (cm) return set_compute_mode(only, cm);
    return set_timeslice(only, slice);
}
