/* A stand-in for NVIDIA's IMEX daemon, `nvidia-imex -c <config>`, for GPU-less tests.
 *
 * What it needs and does, as the real one (sources: imex-common.h for the config and the
 * fabric; NVIDIA's IMEX guide, "Getting Started with IMEX" (the driver check); the comments
 * of NVIDIA's default config.cfg (IMEX_NODE_DISCONNECTED_GRACE_TIME); DCGM's field
 * DCGM_FI_IMEX_DAEMON_STATUS, which names the states `nvidia-imex-ctl -q` reports; public
 * `nvidia-imex-ctl -N` captures for the connectivity letters and "Domain State"; a cloud
 * vendor's IMEX setup guide: the daemons talk TCP, C in the table means connected; the
 * guide's "Connections, Quorum, and Clean up" for the states).
 * - reads config.cfg and the node list at startup and refuses a malformed one (exit 1,
 *   the reason on stderr and in the log);
 * - refuses to start without its driver's NVML beside it (the real one aborts unless the
 *   loaded driver stack is compatible), or when the node's GPUs are not in a completed
 *   fabric clique;
 * - listens on SERVER_PORT at its own address of the node list (BIND_INTERFACE_IP, or the
 *   listed address one of the host's interfaces has) and connects over TCP to every other
 *   listed node at its SERVER_PORT, retrying every second, so that an absent or
 *   unreachable peer keeps the domain from forming;
 * - states: READY once started, whatever its peers (the IMEX guide, "Connections,
 *   Quorum, and Clean up": IMEX no longer needs a quorum to initialise and is ready right
 *   after it starts; NVIDIA's ComputeDomain daemon reads `-q` READY as the local daemon's
 *   state, "not the entire domain"); SHUTTING_DOWN on SIGTERM or SIGINT. Peers show in
 *   the `-N` table: N never connected, C connected, R a lost peer
 *   (IMEX_NODE_DISCONNECTED_GRACE_TIME's default -1 waits for it indefinitely), and
 *   Domain State UP only while every listed node is READY to this one. The recovery wait
 *   after an unclean shutdown (the guide: for nodes that had imported memory, by its
 *   persist.dat) is not modelled: the stand-in has no imports;
 * - with IMEX_CMD_ENABLED=1 serves the command service on IMEX_CMD_PORT for
 *   nvidia-imex-ctl (nvidia-imex-ctl.c);
 * - DAEMONIZE=1 (the default) forks once the sockets are bound and the parent exits 0;
 * - the node list may name peers instead of giving addresses, as NVIDIA's ComputeDomain
 *   daemon writes it (k8s-dra-driver-gpu, cmd/compute-domain-daemon/dnsnames.go: fixed
 *   names mapped in the pod's /etc/hosts). A name is resolved through the hosts file (no
 *   DNS here; the file is FAKE_IMEX_HOSTS when set, for daemons run as host processes)
 *   at start, to find this node, and again before every connection attempt (that driver
 *   relies on IMEX re-resolving as its connections are checked); a name that does not
 *   resolve is a peer not there yet. SIGUSR1 restarts the outgoing connections, at most
 *   once every 5 s, a signal within 5 s of the last one being ignored (the IMEX guide,
 *   "Signal handling").
 *
 * graft's own, not NVIDIA's (whose peer protocol is private: gRPC over TCP, by its error
 * codes): peers open with the line `graft-fake-imex 1 <own address> <cluster UUID>.<clique
 * id>`; a node answers with its own line, or `reject <reason>` and closes when the address
 * is not in its list or the clique is not its own, so daemons only join peers of their
 * own clique, as NVIDIA's ComputeDomain daemons do. Connected peers then send
 * `row <state> <letters>`, their view, for the ctl's table: at once when it changes, and
 * every 250 ms. The command service takes one line, `q` or `N`, answers and closes.
 */
#include "imex-common.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <time.h>

#define HELLO "graft-fake-imex 1"
#define MAX_IN 128

struct peer {
    int fd;        /* outbound connection, -1 when none */
    int phase;     /* 0 none, 1 connecting, 2 hello sent, 3 joined */
    char status;   /* N never connected, C connected, R lost, I invalid (refused) */
    char row[MAX_NODES + 40]; /* its last `<state> <letters>`, "" when unknown */
    char buf[MAX_LINE];
    size_t len;
    double next_try;
};
struct inbound {
    int fd, peer; /* peer: -1 until its hello */
    char buf[MAX_LINE];
    size_t len;
};

static struct imex_config cfg;
static char nodes[MAX_NODES][64], addrs[MAX_NODES][64], clique[128];
static int n_nodes, self = -1;
static struct peer peers[MAX_NODES];
static struct inbound in[MAX_IN];
static FILE *logf;
static volatile sig_atomic_t stop, usr1;
static double last_usr1 = -10;

static void logmsg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(logf, "[%ld] ", (long)time(NULL));
    vfprintf(logf, fmt, ap);
    fputc('\n', logf);
    fflush(logf);
    va_end(ap);
}

static void die(const char *fmt, ...) {
    char msg[2 * MAX_LINE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "nvidia-imex: %s\n", msg);
    if (logf && logf != stderr) logmsg("%s", msg);
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static socklen_t addr_of(const char *ip, int port, struct sockaddr_storage *ss) {
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        return sizeof *a4;
    }
    inet_pton(AF_INET6, ip, &a6->sin6_addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    return sizeof *a6;
}

/* The address of the hosts file's entry for `name`, or "" when it has none. */
static void lookup(const char *name, char *out) {
    const char *path = getenv("FAKE_IMEX_HOSTS");
    FILE *f = fopen(path && *path ? path : "/etc/hosts", "r");
    char line[MAX_LINE];
    *out = 0;
    if (!f) return;
    while (!*out && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#'), *save = NULL;
        if (hash) *hash = 0;
        char *ip = strtok_r(line, " \t\r\n", &save), *h;
        if (!ip || !valid_ip(ip)) continue;
        while ((h = strtok_r(NULL, " \t\r\n", &save)))
            if (!strcmp(h, name)) {
                snprintf(out, 64, "%s", ip);
                break;
            }
    }
    fclose(f);
}

/* Node i's address now: the listed address, or what its name resolves to ("" if none). */
static void resolve(int i) {
    if (valid_ip(nodes[i])) snprintf(addrs[i], 64, "%s", nodes[i]);
    else lookup(nodes[i], addrs[i]);
}

static int listen_on(const char *ip, int port, const char *what) {
    struct sockaddr_storage ss;
    socklen_t len = addr_of(*ip ? ip : "0.0.0.0", port, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 64) < 0)
        die("cannot listen for the %s on %s:%d: %s", what, *ip ? ip : "*", port,
            strerror(errno));
    return fd;
}

/* This node's index in the list: BIND_INTERFACE_IP's, or the first listed address that
 * one of the host's interfaces has. */
static int find_self(void) {
    for (int i = 0; i < n_nodes; i++) resolve(i);
    if (*cfg.bind_ip) {
        for (int i = 0; i < n_nodes; i++)
            if (!strcmp(addrs[i], cfg.bind_ip)) return i;
        die("BIND_INTERFACE_IP %s is not in the node configuration file %s", cfg.bind_ip,
            cfg.node_file);
    }
    struct ifaddrs *ifs, *p;
    if (getifaddrs(&ifs) < 0) die("getifaddrs: %s", strerror(errno));
    for (int i = 0; i < n_nodes; i++)
        for (p = ifs; p; p = p->ifa_next) {
            char ip[64] = "";
            if (!p->ifa_addr) continue;
            if (p->ifa_addr->sa_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)p->ifa_addr)->sin_addr, ip, 64);
            else if (p->ifa_addr->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr, ip, 64);
            if (*ip && !strcmp(ip, addrs[i])) {
                freeifaddrs(ifs);
                return i;
            }
        }
    freeifaddrs(ifs);
    die("no address of the node configuration file %s is on this host's interfaces",
        cfg.node_file);
    return -1;
}

/* The local daemon's state: READY once started, whatever its peers (the guide's
 * "Connections, Quorum, and Clean up": no quorum to initialise; the recovery wait after an
 * unclean shutdown concerns nodes that had imported memory, which the stand-in never has).
 * Who is connected shows in the `-N` table's letters and Domain State. */
static const char *state(void) { return stop ? "SHUTTING_DOWN" : "READY"; }

static void own_row(char *out) {
    for (int i = 0; i < n_nodes; i++) out[i] = i == self ? 'C' : peers[i].status;
    out[n_nodes] = 0;
}

static void drop_out(int i, const char *why) {
    struct peer *p = &peers[i];
    if (p->fd >= 0) close(p->fd);
    if (p->phase == 3) logmsg("lost peer %s: %s", nodes[i], why);
    p->fd = -1;
    if (p->phase == 3) p->status = 'R';
    else if (p->status == 'C') p->status = 'R';
    p->phase = 0;
    p->len = 0;
    p->next_try = now() + 1;
}

static void try_connect(int i) {
    struct peer *p = &peers[i];
    struct sockaddr_storage ss;
    resolve(i);
    if (!*addrs[i]) {
        p->next_try = now() + 1;
        if (p->status == 'C') p->status = 'R';
        return;
    }
    socklen_t len = addr_of(addrs[i], cfg.server_port, &ss);
    p->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd < 0) {
        drop_out(i, strerror(errno));
        return;
    }
    if (connect(p->fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
        drop_out(i, strerror(errno));
        return;
    }
    p->phase = 1;
}

/* Our hello line, or `reject ...` for a peer's hello `line`; sets *idx to the peer. */
static void judge_hello(const char *line, char *reply, size_t len, int *idx) {
    char ip[64], theirs[128];
    *idx = -1;
    if (sscanf(line, HELLO " %63s %127s", ip, theirs) != 2) {
        snprintf(reply, len, "reject not an IMEX peer\n");
        return;
    }
    for (int i = 0; i < n_nodes; i++)
        if (i != self && !strcmp(addrs[i], ip)) *idx = i;
    /* A name mapped since it was last resolved. */
    for (int i = 0; *idx < 0 && i < n_nodes; i++) {
        if (i == self) continue;
        resolve(i);
        if (!strcmp(addrs[i], ip)) *idx = i;
    }
    if (*idx < 0) {
        logmsg("refused %s: not in the node configuration file", ip);
        snprintf(reply, len, "reject %s is not in the node list of %s\n", ip, addrs[self]);
    } else if (strcmp(theirs, clique)) {
        logmsg("refused %s: its clique %s is not ours (%s)", ip, theirs, clique);
        snprintf(reply, len, "reject clique %s is not %s\n", theirs, clique);
        *idx = -1;
    } else {
        snprintf(reply, len, HELLO " %s %s\n", addrs[self], clique);
    }
}

/* Handles what peer i's outbound connection can do now. */
static void on_out(int i, short ev) {
    struct peer *p = &peers[i];
    char line[MAX_LINE];
    if (p->phase == 1) {
        int e = 0;
        socklen_t l = sizeof e;
        getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &e, &l);
        if (e) {
            drop_out(i, strerror(e));
            return;
        }
        if (!(ev & POLLOUT)) return;
        snprintf(line, sizeof line, HELLO " %s %s\n", addrs[self], clique);
        if (write_all(p->fd, line, strlen(line)) < 0) {
            drop_out(i, strerror(errno));
            return;
        }
        p->phase = 2;
        return;
    }
    if (!(ev & (POLLIN | POLLHUP | POLLERR))) return;
    ssize_t r = read(p->fd, p->buf + p->len, sizeof p->buf - 1 - p->len);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
        drop_out(i, r ? strerror(errno) : "connection closed");
        return;
    }
    p->len += (size_t)r;
    p->buf[p->len] = 0;
    char *nl = strchr(p->buf, '\n');
    if (p->phase != 2 || !nl) return;
    *nl = 0;
    int idx;
    judge_hello(p->buf, line, sizeof line, &idx);
    if (idx != i) {
        logmsg("peer %s did not join: %s", nodes[i],
               strncmp(p->buf, "reject", 6) ? line : p->buf);
        drop_out(i, "refused");
        p->status = 'I';
        return;
    }
    p->len = 0;
    p->phase = 3;
    p->status = 'C';
    logmsg("joined peer %s", nodes[i]);
}

static void on_in(struct inbound *c) {
    ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0 || c->len + (size_t)r >= sizeof c->buf - 1) {
        if (c->peer >= 0) peers[c->peer].row[0] = 0;
        close(c->fd);
        c->fd = -1;
        return;
    }
    c->len += (size_t)r;
    c->buf[c->len] = 0;
    char *nl;
    while ((nl = strchr(c->buf, '\n'))) {
        *nl = 0;
        if (c->peer < 0) {
            char reply[MAX_LINE];
            judge_hello(c->buf, reply, sizeof reply, &c->peer);
            write_all(c->fd, reply, strlen(reply));
            if (c->peer < 0) {
                close(c->fd);
                c->fd = -1;
                return;
            }
        } else if (!strncmp(c->buf, "row ", 4)) {
            snprintf(peers[c->peer].row, sizeof peers[c->peer].row, "%s", c->buf + 4);
        }
        c->len -= (size_t)(nl + 1 - c->buf);
        memmove(c->buf, nl + 1, c->len + 1);
    }
}

#include "imex-cmd.h"

static void on_signal(int sig) {
    if (sig == SIGUSR1) usr1 = 1;
    else stop = 1;
}

/* SIGUSR1: every outgoing connection again (names resolved anew), unless one came
 * within 5 s. */
static void on_usr1(void) {
    usr1 = 0;
    if (now() - last_usr1 < 5) {
        logmsg("SIGUSR1 ignored: within 5 s of the last one");
        return;
    }
    last_usr1 = now();
    logmsg("SIGUSR1: restarting the connections to the peers");
    for (int i = 0; i < n_nodes; i++) {
        if (i == self) continue;
        if (peers[i].fd >= 0) drop_out(i, "reconnecting (SIGUSR1)");
        peers[i].next_try = now();
    }
}

int main(int argc, char **argv) {
    const char *path = DEFAULT_CONFIG;
    char err[2 * MAX_LINE];
    int opt;
    logf = stderr;
    /* The version, which graft's binary discovery looks for in the file as in NVIDIA's. */
    if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-v"))) {
        printf("nvidia-imex (graft's stand-in) version %s\n", DRIVER_VERSION);
        return 0;
    }
    while ((opt = getopt(argc, argv, "c:")) != -1) {
        if (opt != 'c') die("usage: nvidia-imex [-c <config file>]");
        path = optarg;
    }
    if (read_config(path, &cfg, err, sizeof err) < 0) die("%s", err);
    if (*cfg.log_file) {
        FILE *f = fopen(cfg.log_file, "a");
        if (f) logf = f;
    }
    logmsg("IMEX stand-in %s starting with %s", DRIVER_VERSION, path);
    if ((n_nodes = read_nodes(cfg.node_file, nodes, err, sizeof err)) < 0) die("%s", err);
    if (check_driver(err, sizeof err) < 0) die("%s", err);
    if (read_clique(clique, sizeof clique, err, sizeof err) < 0) die("%s", err);
    self = find_self();
    int lfd = listen_on(addrs[self], cfg.server_port, "peer service");
    int cfd = cfg.cmd_enabled ? listen_on(cfg.cmd_bind_ip, cfg.cmd_port, "command service") : -1;
    for (int i = 0; i < n_nodes; i++) peers[i] = (struct peer){.fd = -1, .status = 'N'};
    for (int i = 0; i < MAX_IN; i++) in[i].fd = -1;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGUSR1, on_signal);
    if (cfg.daemonize) {
        pid_t pid = fork();
        if (pid < 0) die("fork: %s", strerror(errno));
        if (pid > 0) return 0;
        setsid();
    }
    logmsg("node %d (%s) of %d, clique %s, peer port %d", self, nodes[self], n_nodes, clique,
           cfg.server_port);
    double next_row = 0;
    char sent[MAX_NODES + 64] = "";
    while (!stop) {
        if (usr1) on_usr1();
        struct pollfd fds[2 + MAX_NODES + MAX_IN];
        int who[2 + MAX_NODES + MAX_IN], n = 0;
        fds[n] = (struct pollfd){lfd, POLLIN, 0}, who[n++] = -1;
        if (cfd >= 0) fds[n] = (struct pollfd){cfd, POLLIN, 0}, who[n++] = -2;
        for (int i = 0; i < n_nodes; i++) {
            if (i == self) continue;
            if (peers[i].fd < 0 && now() >= peers[i].next_try) try_connect(i);
            if (peers[i].fd >= 0)
                fds[n] = (struct pollfd){peers[i].fd, peers[i].phase == 1 ? POLLOUT : POLLIN, 0},
                who[n++] = i;
        }
        for (int i = 0; i < MAX_IN; i++)
            if (in[i].fd >= 0) fds[n] = (struct pollfd){in[i].fd, POLLIN, 0}, who[n++] = 1000 + i;
        if (poll(fds, (nfds_t)n, 100) < 0 && errno != EINTR) die("poll: %s", strerror(errno));
        for (int k = 0; k < n; k++) {
            if (!fds[k].revents) continue;
            if (who[k] == -1) {
                int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), j = 0;
                while (fd >= 0 && j < MAX_IN && in[j].fd >= 0) j++;
                if (fd >= 0 && j == MAX_IN) close(fd);
                else if (fd >= 0) in[j] = (struct inbound){.fd = fd, .peer = -1};
            } else if (who[k] == -2) {
                serve_command(cfd);
            } else if (who[k] < 1000) {
                on_out(who[k], fds[k].revents);
            } else {
                on_in(&in[who[k] - 1000]);
            }
        }
        /* The view goes to the peers at once when it changed (a peer joined or was
         * lost), else every 250 ms, for a peer that joined since. */
        char line[MAX_NODES + 64], row[MAX_NODES + 1];
        own_row(row);
        snprintf(line, sizeof line, "row %s %s\n", state(), row);
        if (now() >= next_row || strcmp(line, sent)) {
            for (int i = 0; i < n_nodes; i++)
                if (peers[i].phase == 3 && write_all(peers[i].fd, line, strlen(line)) < 0)
                    drop_out(i, strerror(errno));
            snprintf(sent, sizeof sent, "%s", line);
            next_row = now() + 0.25;
        }
    }
    logmsg("shutting down (%s)", state());
    return 0;
}
