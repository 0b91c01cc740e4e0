/* The fake node's MPS control program (integration/src/fake_gpu.rs compiles it with
 * gcc -static): a real ELF executable holding the driver version, as graft accepts only
 * such binaries, that behaves as graft uses NVIDIA's control daemon. No GPU is involved.
 *
 * Environment: CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), CUDA_MPS_LOG_DIRECTORY
 * (default /var/log/nvidia-mps), CUDA_VISIBLE_DEVICES (only recorded in the log).
 *
 * - `-d`: starts the daemon in the background and exits 0 once it listens on the UNIX
 *   stream socket <pipe dir>/control; exits 1 if one already answers there, or if the
 *   daemon could not start. The daemon writes its pid to
 *   <pipe dir>/nvidia-cuda-mps-control.pid and logs to <log dir>/control.log
 *   (`[<unix time>] Startup CUDA_VISIBLE_DEVICES=<value>`, `[<time>] Command <line>`,
 *   `[<time>] Shutdown`).
 * - no argument: a client; sends each line of stdin to the daemon (one connection each)
 *   and prints the replies; exits 1 with "Cannot find MPS control daemon process" when
 *   none answers (so `echo get_server_list | nvidia-cuda-mps-control` tells whether one
 *   runs).
 * - anything else: usage, exit 1.
 *
 * Commands the daemon answers: get_server_list (nothing: no server runs),
 * set_default_active_thread_percentage N (N), get_default_active_thread_percentage (100.0
 * or the value set), quit (nothing; the daemon removes its socket and pid file and exits).
 * Others: "Unknown command". SIGTERM stops the daemon as quit does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef DRIVER_VERSION
#define DRIVER_VERSION "580.95.05"
#endif

#define DEFAULT_PIPE_DIR "/tmp/nvidia-mps"
#define DEFAULT_LOG_DIR "/var/log/nvidia-mps"
#define MAX_LINE 4096

/* Room left in a PATH_MAX for the names put after the directories. */
#define DIR_MAX (PATH_MAX - 64)
static char pipe_dir[DIR_MAX];
static char log_dir[DIR_MAX];
static char sock_path[PATH_MAX];
static char pid_path[PATH_MAX];
static char log_path[PATH_MAX];

static volatile sig_atomic_t terminate;

static void usage(void) {
    fprintf(stderr,
            "NVIDIA CUDA MPS control (graft's fake, driver " DRIVER_VERSION ")\n"
            "Usage: nvidia-cuda-mps-control [-d]\n"
            "  -d   start the control daemon in the background\n"
            "  (none) read commands from stdin and send them to the running daemon\n");
}

/* `value` made absolute against the working directory (the daemon leaves it for `/`). */
static int absolute(const char *value, char *out, size_t len) {
    if (value[0] == '/') return snprintf(out, len, "%s", value) < (int)len ? 0 : -1;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    return snprintf(out, len, "%s/%s", cwd, value) < (int)len ? 0 : -1;
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
    snprintf(log_path, sizeof log_path, "%s/control.log", log_dir);
    if (strlen(sock_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        fprintf(stderr, "nvidia-cuda-mps-control: socket path too long: %s\n", sock_path);
        return -1;
    }
    return 0;
}

static void sock_addr(struct sockaddr_un *addr) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path, sock_path, strlen(sock_path) + 1);
}

/* A connection to the daemon's socket, or -1 when none answers. */
static int connect_control(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un addr;
    sock_addr(&addr);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Appends `[<unix time>] <message>` to control.log in one write. */
static void log_line(const char *fmt, ...) {
    char msg[MAX_LINE + 128];
    int n = snprintf(msg, sizeof msg, "[%lld] ", (long long)time(NULL));
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof msg - 2) n = (int)sizeof msg - 2;
    msg[n++] = '\n';
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    write_all(fd, msg, (size_t)n);
    close(fd);
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
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* ---- the daemon ---- */

static int listen_fd = -1;
static int lock_fd = -1;
static char thread_percentage[64] = "100.0";

static void on_term(int sig) {
    (void)sig;
    terminate = 1;
}

/* Stops listening, removes the socket and pid file and logs the shutdown: all before the
 * quitting client's connection closes, so that it sees them gone when its call returns. */
static void shut_down(void) {
    if (listen_fd >= 0) close(listen_fd);
    listen_fd = -1;
    unlink(sock_path);
    unlink(pid_path);
    log_line("Shutdown");
}

/* The first line a client sends (without its line end), or an empty string. */
static void read_command(int fd, char *line, size_t len) {
    size_t n = 0;
    while (n < len - 1) {
        ssize_t r = read(fd, line + n, len - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
        if (memchr(line + n - (size_t)r, '\n', (size_t)r)) break;
    }
    line[n] = '\0';
    char *end = strchr(line, '\n');
    if (end) *end = '\0';
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
        line[--n] = '\0';
}

static void reply(int fd, const char *text) {
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s\n", text);
    write_all(fd, buf, (size_t)n);
}

/* Answers one command; returns 1 when it was quit (the connection is then still open). */
static int handle(int fd, const char *line) {
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return 0;
    log_line("Command %s", p);
    char word[64];
    size_t w = strcspn(p, " \t");
    const char *arg = p + w;
    while (*arg == ' ' || *arg == '\t') arg++;
    snprintf(word, sizeof word, "%.*s", (int)(w < sizeof word ? w : sizeof word - 1), p);

    if (strcmp(word, "get_server_list") == 0 && !*arg) return 0;
    if (strcmp(word, "quit") == 0 && !*arg) return 1;
    if (strcmp(word, "get_default_active_thread_percentage") == 0 && !*arg) {
        reply(fd, thread_percentage);
        return 0;
    }
    if (strcmp(word, "set_default_active_thread_percentage") == 0 && *arg) {
        char *end;
        errno = 0;
        double v = strtod(arg, &end);
        if (errno || end == arg || *end || !(v > 0.0 && v <= 100.0) ||
            strlen(arg) >= sizeof thread_percentage) {
            reply(fd, "Invalid active thread percentage");
            return 0;
        }
        snprintf(thread_percentage, sizeof thread_percentage, "%s", arg);
        reply(fd, thread_percentage);
        return 0;
    }
    reply(fd, "Unknown command");
    return 0;
}

static void serve(void) {
    while (!terminate) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            break;
        }
        /* A client that connects and says nothing does not hold the daemon for long. */
        struct timeval tv = {2, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char line[MAX_LINE];
        read_command(fd, line, sizeof line);
        int quit = handle(fd, line);
        if (quit) shut_down();
        close(fd);
        if (quit) _exit(0);
    }
    shut_down();
    _exit(terminate ? 0 : 1);
}

/* Tells the waiting parent why the daemon could not start, and gives up. */
static void fail(int status_fd, const char *what) {
    char msg[PATH_MAX + 128];
    int n = snprintf(msg, sizeof msg, "nvidia-cuda-mps-control: %s: %s\n", what,
                     strerror(errno));
    write_all(status_fd, msg, (size_t)n);
    _exit(1);
}

static void daemon_child(int status_fd) {
    setsid();
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        if (null > 2) close(null);
    }
    if (chdir("/") != 0) fail(status_fd, "chdir /");

    /* The pid file's lock settles a race between two daemons started at once. */
    lock_fd = open(pid_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) fail(status_fd, pid_path);
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        const char *msg = "An instance of this daemon is already running\n";
        write_all(status_fd, msg, strlen(msg));
        _exit(1);
    }

    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) fail(status_fd, "socket");
    struct sockaddr_un addr;
    sock_addr(&addr);
    if (unlink(sock_path) != 0 && errno != ENOENT) fail(status_fd, sock_path);
    if (bind(listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        fail(status_fd, sock_path);
    if (listen(listen_fd, 64) != 0) fail(status_fd, sock_path);

    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(lock_fd, 0) != 0 || write_all(lock_fd, pid, (size_t)n) != 0)
        fail(status_fd, pid_path);

    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    log_line("Startup CUDA_VISIBLE_DEVICES=%s", visible ? visible : "");

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    write_all(status_fd, "OK", 2);
    close(status_fd);
    serve();
}

static int start_daemon(void) {
    int fd = connect_control();
    if (fd >= 0) {
        close(fd);
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    if (mkdir_p(pipe_dir) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", pipe_dir, strerror(errno));
        return 1;
    }
    if (mkdir_p(log_dir) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", log_dir, strerror(errno));
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
        daemon_child(status[1]);
        _exit(1);
    }
    close(status[1]);
    /* The child says OK once it listens, or why it could not; EOF alone is a failure. */
    char buf[PATH_MAX + 256];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(status[0], buf + len, sizeof buf - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0 || len + (size_t)r >= sizeof buf - 1) {
            if (r > 0) len += (size_t)r;
            break;
        }
        len += (size_t)r;
    }
    close(status[0]);
    buf[len] = '\0';
    if (strcmp(buf, "OK") == 0) return 0;
    if (len == 0)
        fprintf(stderr, "nvidia-cuda-mps-control: the daemon exited while starting\n");
    else
        fputs(buf, stderr);
    return 1;
}

/* ---- the client ---- */

static int not_running(void) {
    fprintf(stderr, "Cannot find MPS control daemon process\n");
    return 1;
}

static int send_command(const char *line) {
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
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        fwrite(buf, 1, (size_t)r, stdout);
    }
    fflush(stdout);
    close(fd);
    return 0;
}

static int client(void) {
    char line[MAX_LINE];
    int sent = 0;
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strcspn(line, "\r\n");
        line[n] = '\0';
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

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "-d") != 0)) {
        usage();
        return 1;
    }
    if (setup_paths() != 0) return 1;
    return argc == 2 ? start_daemon() : client();
}
