/* The fake node's MPS server (integration/src/fake_gpu.rs compiles it with gcc -static,
 * beside the fake nvidia-cuda-mps-control, which starts it from PATH as the real daemon
 * does). Sources: `man nvidia-cuda-mps-control` (580) and the MPS guide
 * (docs.nvidia.com/deploy/mps), as noted below; the wire protocol with the daemon and the
 * fake libcuda is graft's own (NVIDIA's is private, see mps-common.h).
 *
 * - It is started by the control daemon only (stdin its command pipe, the limits in its
 *   environment), as the UID of the clients it serves: it refuses a client of another UID
 *   (one server per UID, the man page). Like the real server it needs the GPU's device
 *   nodes: without /dev/nvidiactl it fails to start, and serving a MIG device
 *   (CUDA_VISIBLE_DEVICES=MIG-...) without two capability nodes in /dev/nvidia-caps too.
 * - It listens on <pipe dir>/mps-server-<pid> and reports `ready`, then `clients N PID...`
 *   whenever a client comes or goes, on stdout (the daemon's pipe); logs go to stderr,
 *   which the daemon points at <log dir>/server.log.
 * - A client's limits: the server's active thread percentage and pinned device memory
 *   limit, lowered by what the client asks in CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
 *   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT when that is lower ("This environment variable will
 *   only further constrain the limit set by the control daemon", the guide's environment
 *   variables). Each client is logged as `Client <pid> uid <uid> active_thread_percentage
 *   <P> pinned_mem_limit <0=NM|none> (server <P> <limits>; client asked <atp> <limits>)`.
 * - Commands from the daemon: `atp P` and `mem DEV MIB` (set_active_thread_percentage and
 *   set_device_pinned_mem_limit: for clients that come later), `terminate PID`
 *   (terminate_client), `exit`; it exits too when the daemon goes.
 */
#include "mps-common.h"

#include <dirent.h>
#include <signal.h>

static char sock_path[PATH_MAX];
static double atp = 100.0;
static long long mem[MAX_DEVS];

#define MAX_CLIENTS 64
static struct client {
    int fd;
    struct ucred cred;
} clients[MAX_CLIENTS];
static int nclients;

static void logs(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog_fd(STDERR_FILENO, fmt, ap);
    va_end(ap);
}

static void report(void) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "clients %d", nclients);
    for (int i = 0; i < nclients && n < (int)sizeof msg - 16; i++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, " %ld", (long)clients[i].cred.pid);
    msg[n++] = '\n';
    write_all(STDOUT_FILENO, msg, (size_t)n);
}

/* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's form, `DEV=VALUE[,DEV=VALUE...]`, into `out` (MiB per
 * device, -1 where unset); -1 when malformed. */
static int parse_limits(const char *s, long long *out) {
    for (int d = 0; d < MAX_DEVS; d++) out[d] = -1;
    if (!s || !*s || strcmp(s, "-") == 0) return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *rest = buf, *item; (item = strtok_r(rest, ",", &rest));) {
        char *eq = strchr(item, '=');
        if (!eq) return -1;
        *eq = '\0';
        char *end;
        long d = strtol(item, &end, 10);
        long long m = parse_mem(eq + 1);
        if (*end || end == item || d < 0 || d >= MAX_DEVS || m < 0) return -1;
        out[d] = m;
    }
    return 0;
}

static void limits_text(const long long *m, char *out, size_t len) {
    out[0] = '\0';
    for (int d = 0; d < MAX_DEVS; d++) {
        if (m[d] < 0) continue;
        size_t n = strlen(out);
        snprintf(out + n, len - n, "%s%d=%lldM", n ? "," : "", d, m[d]);
    }
    if (!out[0]) snprintf(out, len, "none");
}

static void attach(int fd) {
    struct ucred cred;
    char line[512], want_atp[64] = "-", want_mem[256] = "-";
    if (peer(fd, &cred) != 0 || nclients == MAX_CLIENTS) {
        close(fd);
        return;
    }
    if (cred.uid != getuid()) {
        logs("Client %ld uid %u refused: this server serves uid %u", (long)cred.pid,
             (unsigned)cred.uid, (unsigned)getuid());
        write_str(fd, "error this server serves another user\n");
        close(fd);
        return;
    }
    if (read_line(fd, line, sizeof line, 2000) < 0 ||
        sscanf(line, "attach %63s %255s", want_atp, want_mem) != 2) {
        close(fd);
        return;
    }
    double eff = atp, asked;
    char *end;
    asked = strtod(want_atp, &end);
    if (end != want_atp && !*end && asked > 0.0 && asked < eff) eff = asked;
    long long req[MAX_DEVS], got[MAX_DEVS];
    if (parse_limits(want_mem, req) != 0) parse_limits(NULL, req);
    for (int d = 0; d < MAX_DEVS; d++)
        got[d] = mem[d] < 0 ? req[d] : (req[d] >= 0 && req[d] < mem[d] ? req[d] : mem[d]);
    char server_text[256], got_text[256];
    limits_text(mem, server_text, sizeof server_text);
    limits_text(got, got_text, sizeof got_text);
    char msg[320];
    snprintf(msg, sizeof msg, "limits %g %s\n", eff, got_text);
    write_str(fd, msg);
    logs("Client %ld uid %u active_thread_percentage %g pinned_mem_limit %s (server %g %s; "
         "client asked %s %s)",
         (long)cred.pid, (unsigned)cred.uid, eff, got_text, atp, server_text, want_atp, want_mem);
    clients[nclients].fd = fd;
    clients[nclients].cred = cred;
    nclients++;
    report();
}

static void drop(int i, const char *why) {
    logs("Client %ld %s", (long)clients[i].cred.pid, why);
    close(clients[i].fd);
    clients[i] = clients[--nclients];
    report();
}

static volatile sig_atomic_t terminate;
static void on_term(int sig) {
    (void)sig;
    terminate = 1;
}

/* One command from the daemon; returns 1 to exit. */
static int command(const char *line) {
    double v;
    int d;
    long long m;
    long pid;
    if (strcmp(line, "exit") == 0) return 1;
    if (sscanf(line, "atp %lf", &v) == 1 && v > 0.0 && v <= 100.0) {
        atp = v;
        logs("Limits: active_thread_percentage %g for new clients", v);
    } else if (sscanf(line, "mem %d %lld", &d, &m) == 2 && d >= 0 && d < MAX_DEVS && m >= 0) {
        mem[d] = m;
        logs("Limits: pinned_mem_limit %d=%lldM for new clients", d, m);
    } else if (sscanf(line, "terminate %ld", &pid) == 1) {
        for (int i = 0; i < nclients; i++)
            if ((long)clients[i].cred.pid == pid) {
                drop(i, "terminated");
                break;
            }
    }
    return 0;
}

/* Character device nodes in /dev/nvidia-caps. */
static int caps_nodes(void) {
    DIR *d = opendir("/dev/nvidia-caps");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof path, "/dev/nvidia-caps/%s", e->d_name);
        if (lstat(path, &st) == 0 && S_ISCHR(st.st_mode)) n++;
    }
    closedir(d);
    return n;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const char *a = getenv("FAKE_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (!a || isatty(STDIN_FILENO)) {
        fprintf(stderr, "nvidia-cuda-mps-server (graft's fake, driver " DRIVER_VERSION
                        "): started by nvidia-cuda-mps-control only\n");
        return 1;
    }
    atp = strtod(a, NULL);
    if (!(atp > 0.0 && atp <= 100.0)) atp = 100.0;
    if (parse_limits(getenv("FAKE_MPS_PINNED_MEM_LIMIT"), mem) != 0) parse_limits(NULL, mem);
    struct stat st;
    if (stat("/dev/nvidiactl", &st) != 0 || !S_ISCHR(st.st_mode)) {
        logs("Server %ld cannot start: /dev/nvidiactl is not a device node", (long)getpid());
        write_str(STDOUT_FILENO, "error /dev/nvidiactl is not a device node\n");
        return 1;
    }
    /* A MIG device opens only with its GPU and compute instances' access capabilities
     * (NVIDIA's MIG user guide, "Device Nodes and Capabilities"): nodes under
     * /dev/nvidia-caps, at least one for each. */
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible && strncmp(visible, "MIG-", 4) == 0 && caps_nodes() < 2) {
        logs("Server %ld cannot start: %s without its capabilities in /dev/nvidia-caps",
             (long)getpid(), visible);
        write_str(STDOUT_FILENO, "error MIG device without its access capabilities\n");
        return 1;
    }
    const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char pipe_dir[PATH_MAX - 64];
    if (absolute(p && *p ? p : DEFAULT_PIPE_DIR, pipe_dir, sizeof pipe_dir) != 0) return 1;
    snprintf(sock_path, sizeof sock_path, SERVER_SOCKET_FMT, pipe_dir, (long)getpid());
    int lfd = listen_at(sock_path);
    if (lfd < 0) {
        logs("Server %ld cannot listen on %s: %s", (long)getpid(), sock_path, strerror(errno));
        dprintf(STDOUT_FILENO, "error cannot listen on %s\n", sock_path);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    char text[256];
    limits_text(mem, text, sizeof text);
    logs("Server %ld uid %u ready: active_thread_percentage %g pinned_mem_limit %s",
         (long)getpid(), (unsigned)getuid(), atp, text);
    write_str(STDOUT_FILENO, "ready\n");
    int done = 0;
    while (!done && !terminate) {
        struct pollfd pf[2 + MAX_CLIENTS];
        pf[0] = (struct pollfd){lfd, POLLIN, 0};
        pf[1] = (struct pollfd){STDIN_FILENO, POLLIN, 0};
        for (int i = 0; i < nclients; i++) pf[2 + i] = (struct pollfd){clients[i].fd, POLLIN, 0};
        int n = 2 + nclients;
        if (poll(pf, (nfds_t)n, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        /* A client's connection lasts as long as the client: EOF is its exit. */
        for (int i = nclients - 1; i >= 0; i--) {
            if (!pf[2 + i].revents) continue;
            char c;
            if (read(clients[i].fd, &c, 1) <= 0) drop(i, "disconnected");
        }
        if (pf[1].revents) {
            char line[256];
            if (read_line(STDIN_FILENO, line, sizeof line, 1000) < 0 && !line[0])
                done = 1;
            else
                done = command(line);
        }
        if (pf[0].revents & POLLIN) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) attach(fd);
        }
    }
    unlink(sock_path);
    logs("Server %ld exiting", (long)getpid());
    return 0;
}
