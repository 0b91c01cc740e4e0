/* The fake node's MPS control program (integration/src/fake_gpu.rs compiles it with
 * gcc -static): a real ELF executable holding the driver version, as graft accepts only
 * such binaries, that behaves as NVIDIA's control daemon of driver 580 is documented to.
 * No GPU is involved. Sources: `man nvidia-cuda-mps-control` (580), the MPS guide
 * (docs.nvidia.com/deploy/mps: "Appendix: Tools and Interface Reference", "Starting
 * multiple control/server pairs", the environment variables).
 *
 * Environment: CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), CUDA_MPS_LOG_DIRECTORY
 * (default /var/log/nvidia-mps), CUDA_VISIBLE_DEVICES (logged, handed to servers).
 *
 * - `-d` starts the daemon in the background (exits 0 once it listens on <pipe>/control),
 *   `-f` runs it in the foreground (the guide's two start modes). Either refuses when a
 *   daemon already answers on the pipe directory ("An instance of this daemon is already
 *   running"): one control daemon per pipe directory, several pairs only on several
 *   directories. It creates the pipe and log directories when missing and refuses a pipe
 *   directory that is not a directory it can write. Like the real one it writes its pid to
 *   <pipe>/nvidia-cuda-mps-control.pid when it starts (the file a running daemon's pipe
 *   directory holds next to `control`, root's, as listings of it show; scripts and tools
 *   find the daemon by it), opening that path as it finds it, creating it and truncating
 *   it: a symlink there is followed, so a tenant who plants one points a root process's
 *   write anywhere that process can reach (the hazard graft's sandbox contains). After its
 *   Startup line it logs its capability sets and no_new_privs as /proc/self/status shows
 *   them (`Privileges CapBnd:\t...`), for tests of that sandbox. Logs: <log>/control.log
 *   (`[<unix time>] Startup CUDA_VISIBLE_DEVICES=...`, `Command <line>` for every command,
 *   `Server <pid> starting uid <uid> ...`, `Server <pid> exited ...`, `Client <pid> uid
 *   <uid> ...`, `Shutdown`); servers log to <log>/server.log.
 * - Clients (the man page, DESCRIPTION): a CUDA client (the fake libcuda) asks the daemon
 *   for a server. One server runs per UID: with none running the daemon starts
 *   `nvidia-cuda-mps-server` from PATH as the client's UID (uid and gid from SO_PEERCRED;
 *   only root can start one for another UID); one of the client's UID serves it; one of
 *   another UID makes the client wait (queued) until that server's clients are done, then
 *   that server is told to exit and one of the waiting UID starts. Driver 580 has only this
 *   legacy protocol. A server starts with the daemon's default limits at that moment.
 * - MPS v3 (the guide of release 615 on, "MPS v3 Interface"): built with a DRIVER_VERSION of
 *   615 or later, the program also takes `-p 2|3` / `--protocol` (CUDA_MPS_PROTOCOL_VERSION
 *   wins over the flag), `-q` / `--quit`, and `<module> <verb> [args]`, sent to the
 *   running daemon, which answers by its own protocol. Under `-p 3` each UID's clients get
 *   a server of their own, `uid_<uid>`, beside the others' (no client waits for another
 *   UID), and the v3 commands of mps-v3.h replace the legacy ones. An older build knows
 *   none of these and prints its usage (exit 1), as it does for any argument it does not
 *   know. The daemon logs `Protocol <n>` after its Startup line.
 * - no argument: the client mode; sends each line of stdin to the daemon (a connection
 *   each) and prints the replies; exits 1 with "Cannot find MPS control daemon process"
 *   when none answers.
 * - Commands: get_server_list, get_server_status PID, start_server -uid UID,
 *   get_client_list PID, terminate_client SERVER_PID CLIENT_PID, quit (servers stop, the
 *   socket and pid file go, the daemon exits 0; SIGTERM does the same),
 *   set_default_active_thread_percentage P, get_default_active_thread_percentage,
 *   set_active_thread_percentage PID P, get_active_thread_percentage PID,
 *   set_default_device_pinned_mem_limit DEV VALUE, get_default_device_pinned_mem_limit DEV,
 *   set_device_pinned_mem_limit PID DEV VALUE, get_device_pinned_mem_limit PID DEV (VALUE:
 *   an integer and M or G). The set_default_ forms affect servers started later, the PID
 *   forms a running server's new clients. Anything else: "Unknown command". Any client of
 *   the socket may send them, as with the real daemon.
 */
#include "mps-common.h"

#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>

#define DIR_MAX (PATH_MAX - 64)
static char pipe_dir[DIR_MAX], log_dir[DIR_MAX];
static char sock_path[PATH_MAX], pid_path[PATH_MAX];
static int control_log = -1, server_log = -1;

static void logc(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog_fd(control_log, fmt, ap);
    va_end(ap);
}

#include "mps-daemon.h"

static void usage(void) {
    fprintf(stderr,
            "NVIDIA CUDA MPS control (graft's fake, driver " DRIVER_VERSION ")\n"
            "Usage: nvidia-cuda-mps-control [-d | -f]%s\n"
            "  -d   start the control daemon in the background\n"
            "  -f   run the control daemon in the foreground\n"
            "  (none) read commands from stdin and send them to the running daemon\n",
            atoi(DRIVER_VERSION) >= 615 ? " [-p 2|3] | -q | <module> <verb> [args]" : "");
}

static int setup_paths(void) {
    const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY");
    const char *l = getenv("CUDA_MPS_LOG_DIRECTORY");
    if (!p || !*p) p = DEFAULT_PIPE_DIR;
    if (!l || !*l) l = DEFAULT_LOG_DIR;
    if (absolute(p, pipe_dir, sizeof pipe_dir) || absolute(l, log_dir, sizeof log_dir)) {
        fprintf(stderr, "nvidia-cuda-mps-control: pipe or log directory path too long\n");
        return -1;
    }
    snprintf(sock_path, sizeof sock_path, "%s/control", pipe_dir);
    snprintf(pid_path, sizeof pid_path, "%s/nvidia-cuda-mps-control.pid", pipe_dir);
    struct sockaddr_un a;
    if (unix_addr(&a, sock_path) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: socket path too long: %s\n", sock_path);
        return -1;
    }
    return 0;
}

/* A connection to the daemon's socket, or -1 when none answers. */
static int connect_control(void) {
    struct sockaddr_un addr;
    unix_addr(&addr, sock_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* mkdir -p with mode 0755 for the missing components. */
static int mkdir_p(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = c;
        if (c == '\0') break;
    }
    return 0;
}

/* ---- starting the daemon ---- */

/* Why the daemon could not start, to the waiting parent (-d) or stderr (-f). */
static void fail(int status_fd, const char *what, int err) {
    char msg[PATH_MAX + 128];
    int n = snprintf(msg, sizeof msg, "nvidia-cuda-mps-control: %s: %s\n", what, strerror(err));
    write_all(status_fd, msg, (size_t)n);
    _exit(1);
}

/* The Cap* and NoNewPrivs lines of /proc/self/status, to the control log. */
static void log_privileges(void) {
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) {
        logc("Privileges unknown: %s", strerror(errno));
        return;
    }
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Cap", 3) != 0 && strncmp(line, "NoNewPrivs:", 11) != 0) continue;
        line[strcspn(line, "\n")] = '\0';
        logc("Privileges %s", line);
    }
    fclose(f);
}

static void run_daemon(int status_fd) {
    if (mkdir_p(pipe_dir) != 0) fail(status_fd, pipe_dir, errno);
    struct stat st;
    if (stat(pipe_dir, &st) != 0) fail(status_fd, pipe_dir, errno);
    if (!S_ISDIR(st.st_mode)) fail(status_fd, pipe_dir, ENOTDIR);
    if (access(pipe_dir, W_OK | X_OK) != 0) fail(status_fd, "cannot use pipe directory", errno);
    if (mkdir_p(log_dir) != 0) fail(status_fd, log_dir, errno);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/control.log", log_dir);
    control_log = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (control_log < 0) fail(status_fd, path, errno);
    snprintf(path, sizeof path, "%s/server.log", log_dir);
    server_log = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (server_log < 0) fail(status_fd, path, errno);

    /* The pid file's lock settles a race between two daemons started at once (so it is
     * truncated once the lock is held, below). */
    int lock_fd = open(pid_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) fail(status_fd, pid_path, errno);
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        write_str(status_fd, "An instance of this daemon is already running\n");
        _exit(1);
    }
    listen_fd = listen_at(sock_path);
    if (listen_fd < 0) fail(status_fd, sock_path, errno);
    /* Clients of every UID connect here (the daemon starts servers for all of them). */
    if (chmod(sock_path, 0666) != 0) fail(status_fd, sock_path, errno);
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(lock_fd, 0) != 0 || write_all(lock_fd, pid, (size_t)n) != 0)
        fail(status_fd, pid_path, errno);

    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    logc("Startup CUDA_VISIBLE_DEVICES=%s", visible ? visible : "");
    logc("Protocol %d", protocol);
    log_privileges();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (status_fd != STDERR_FILENO) {
        write_all(status_fd, "OK", 2);
        close(status_fd);
    }
    serve();
}

static int start_daemon(int foreground) {
    int fd = connect_control();
    if (fd >= 0) {
        close(fd);
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    if (foreground) {
        run_daemon(STDERR_FILENO);
        return 1;
    }
    int status[2];
    if (pipe2(status, O_CLOEXEC) != 0) {
        perror("nvidia-cuda-mps-control: pipe");
        return 1;
    }
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) {
        perror("nvidia-cuda-mps-control: fork");
        return 1;
    }
    if (child == 0) {
        close(status[0]);
        setsid();
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            if (null > 2) close(null);
        }
        if (chdir("/") != 0) fail(status[1], "chdir /", errno);
        run_daemon(status[1]);
        _exit(1);
    }
    close(status[1]);
    /* The child says OK once it listens, or why it could not; EOF alone is a failure. */
    char buf[PATH_MAX + 256];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(status[0], buf + len, sizeof buf - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        if (len >= sizeof buf - 1) break;
    }
    close(status[0]);
    buf[len] = '\0';
    if (strcmp(buf, "OK") == 0) return 0;
    fputs(len ? buf : "nvidia-cuda-mps-control: the daemon exited while starting\n", stderr);
    return 1;
}

/* ---- the client mode ---- */

static int not_running(void) {
    fprintf(stderr, "Cannot find MPS control daemon process\n");
    return 1;
}

/* Sends one command line to the daemon and prints its answer. With `errors` (a v3
 * command), an answer that begins with `Error` goes to stderr and makes the exit status 1. */
static int send_line(const char *line, int errors) {
    int fd = connect_control();
    if (fd < 0) return not_running();
    char msg[MAX_LINE + 2];
    int n = snprintf(msg, sizeof msg, "%s\n", line);
    if (n >= (int)sizeof msg) n = (int)sizeof msg - 1;
    if (write_all(fd, msg, (size_t)n) != 0) {
        close(fd);
        return not_running();
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    int failed = 0, first = 1;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (errors && first && strncmp(buf, "Error", r < 5 ? (size_t)r : 5) == 0) failed = 1;
        first = 0;
        fwrite(buf, 1, (size_t)r, failed ? stderr : stdout);
    }
    fflush(NULL);
    close(fd);
    return failed;
}

static int send_command(const char *line) { return send_line(line, 0); }

static int client(void) {
    char line[MAX_LINE];
    int sent = 0;
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) continue;
        if (send_command(p) != 0) return 1;
        sent = 1;
    }
    /* No command: still tells whether a daemon answers (it ignores an empty one). */
    if (!sent) {
        int fd = connect_control();
        if (fd < 0) return not_running();
        close(fd);
    }
    return 0;
}

/* Whether this driver's control program has MPS v3 (`-p 3`): documented from release 615
 * on. A legacy one knows only -d and -f. */
static int has_v3(void) { return atoi(DRIVER_VERSION) >= 615; }

/* A v3 command (`<module> <verb> ...`, the words of argv) sent to the running daemon;
 * exits 1 when it answers an error. */
static int v3_command(int argc, char **argv) {
    char line[MAX_LINE] = "";
    for (int i = 0; i < argc; i++) {
        size_t n = strlen(line);
        snprintf(line + n, sizeof line - n, "%s%s", i ? " " : "", argv[i]);
    }
    return send_line(line, 1);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    int mode = 0; /* 'd', 'f', 'q', or 0: the client */
    int first_word = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-d") == 0 || strcmp(a, "--daemon") == 0) {
            mode = mode ? -1 : 'd';
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--foreground") == 0) {
            mode = mode ? -1 : 'f';
        } else if (has_v3() && (strcmp(a, "-q") == 0 || strcmp(a, "--quit") == 0)) {
            mode = mode ? -1 : 'q';
        } else if (has_v3() && (strcmp(a, "-p") == 0 || strcmp(a, "--protocol") == 0) &&
                   i + 1 < argc && (strcmp(argv[i + 1], "2") == 0 || strcmp(argv[i + 1], "3") == 0)) {
            protocol = atoi(argv[++i]);
        } else if (has_v3() && a[0] != '-' && !mode) {
            first_word = i;
            break;
        } else {
            mode = -1;
        }
    }
    if (mode < 0 || (first_word < argc && mode)) {
        usage();
        return 1;
    }
    /* The variable wins over the flag (the guide's "Enabling MPS v3"). */
    const char *env = getenv("CUDA_MPS_PROTOCOL_VERSION");
    if (has_v3() && env && (strcmp(env, "2") == 0 || strcmp(env, "3") == 0)) protocol = atoi(env);
    if (setup_paths() != 0) return 1;
    for (int i = 0; i < MAX_DEVS; i++) def_mem[i] = -1;
    if (mode == 'd' || mode == 'f') return start_daemon(mode == 'f');
    if (mode == 'q') return send_command("quit");
    if (first_word < argc) return v3_command(argc - first_word, argv + first_word);
    return client();
}
