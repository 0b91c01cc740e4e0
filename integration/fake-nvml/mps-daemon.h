/* The fake MPS control daemon's running part (included by nvidia-cuda-mps-control.c, whose
 * header says what it does and where each behaviour comes from): its servers (one at a
 * time under the legacy protocol, one per UID under v3), the clients waiting for a server
 * of their UID, the control commands, and the loop that serves them all from one thread. */

static int listen_fd = -1;
static volatile sig_atomic_t terminate;

static void on_term(int sig) {
    (void)sig;
    terminate = 1;
}

/* Defaults for servers started later; -1: no pinned memory limit for that device. */
static double def_atp = 100.0;
static long long def_mem[MAX_DEVS];

/* A running server (pid 0: a free slot): it reads commands on `cmd` and reports on `rep`
 * (`ready`, `clients N PID...`, `error TEXT`). Under the legacy protocol at most one runs;
 * under MPS v3 one per UID, `uid_<uid>`. */
#define MAX_SERVERS 8
static struct server {
    pid_t pid;
    uid_t uid;
    int cmd, rep;
    int ready, draining, nclients;
    char clients[1024];
    double atp;
    long long mem[MAX_DEVS];
    char buf[2048];
    size_t len;
} servers[MAX_SERVERS];

/* 2: the legacy protocol; 3: MPS v3 (`-p 3`). */
static int protocol = 2;

static struct server *server_of_uid(uid_t uid) {
    for (int i = 0; i < MAX_SERVERS; i++)
        if (servers[i].pid && servers[i].uid == uid) return &servers[i];
    return NULL;
}

/* Any running server (the legacy protocol's only one). */
static struct server *running(void) {
    for (int i = 0; i < MAX_SERVERS; i++)
        if (servers[i].pid) return &servers[i];
    return NULL;
}

/* Clients waiting for a server of their UID. */
#define MAX_WAITING 64
static struct waiter {
    int fd;
    struct ucred cred;
} waiting[MAX_WAITING];
static int nwaiting;

static void drop_waiter(int i, const char *reply) {
    if (reply) write_str(waiting[i].fd, reply);
    close(waiting[i].fd);
    waiting[i] = waiting[--nwaiting];
}

static void mem_spec(const long long *mem, char *out, size_t len) {
    out[0] = '\0';
    for (int d = 0; d < MAX_DEVS; d++) {
        if (mem[d] < 0) continue;
        size_t n = strlen(out);
        snprintf(out + n, len - n, "%s%d=%lldM", n ? "," : "", d, mem[d]);
    }
}

static void tell_server(struct server *srv, const char *fmt, ...) {
    if (!srv || !srv->pid) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    write_str(srv->cmd, msg);
}

static void spawn_server(uid_t uid, gid_t gid) {
    struct server *srv = NULL;
    for (int i = 0; i < MAX_SERVERS && !srv; i++)
        if (!servers[i].pid) srv = &servers[i];
    if (!srv) return;
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0) return;
    if (pipe2(from, O_CLOEXEC) != 0) {
        close(to[0]);
        close(to[1]);
        return;
    }
    char atp[32], pinned[256];
    snprintf(atp, sizeof atp, "%g", def_atp);
    mem_spec(def_mem, pinned, sizeof pinned);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        if (server_log >= 0) dup2(server_log, 2);
        if (getuid() != uid || getgid() != gid) {
            if ((getuid() == 0 && setgroups(0, NULL) != 0) || setgid(gid) != 0 || setuid(uid) != 0) {
                dprintf(1, "error cannot become uid %u: %s\n", (unsigned)uid, strerror(errno));
                _exit(1);
            }
        }
        setenv("FAKE_MPS_ACTIVE_THREAD_PERCENTAGE", atp, 1);
        setenv("FAKE_MPS_PINNED_MEM_LIMIT", pinned, 1);
        execlp("nvidia-cuda-mps-server", "nvidia-cuda-mps-server", (char *)NULL);
        dprintf(1, "error cannot run nvidia-cuda-mps-server: %s\n", strerror(errno));
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    if (pid < 0) {
        close(to[1]);
        close(from[0]);
        return;
    }
    memset(srv, 0, sizeof *srv);
    srv->pid = pid;
    srv->uid = uid;
    srv->cmd = to[1];
    srv->rep = from[0];
    fcntl(srv->rep, F_SETFL, O_NONBLOCK);
    srv->atp = def_atp;
    memcpy(srv->mem, def_mem, sizeof srv->mem);
    logc("Server %ld starting uid %u active_thread_percentage %g pinned_mem_limit %s", (long)pid,
         (unsigned)uid, def_atp, pinned[0] ? pinned : "none");
}

/* Hands each running server to the waiting clients of its UID. */
static void answer_waiting(void) {
    for (int i = 0; i < nwaiting;) {
        struct server *srv = server_of_uid(waiting[i].cred.uid);
        if (srv && srv->ready && !srv->draining) {
            char msg[64];
            snprintf(msg, sizeof msg, "server %ld\n", (long)srv->pid);
            drop_waiter(i, msg);
        } else {
            i++;
        }
    }
}

static void server_gone(struct server *srv) {
    int st = 0;
    for (int i = 0; i < 100 && waitpid(srv->pid, &st, WNOHANG) == 0; i++) usleep(50000);
    if (waitpid(srv->pid, &st, WNOHANG) == 0) {
        kill(srv->pid, SIGKILL);
        waitpid(srv->pid, &st, 0);
    }
    logc("Server %ld exited (status %d)", (long)srv->pid, st);
    if (!srv->ready) {
        /* It never served: its UID's clients get the failure rather than wait forever. */
        for (int i = 0; i < nwaiting;)
            if (waiting[i].cred.uid == srv->uid)
                drop_waiter(i, "error the MPS server could not start\n");
            else
                i++;
    }
    close(srv->cmd);
    close(srv->rep);
    memset(srv, 0, sizeof *srv);
    /* Legacy: the first waiting UID's turn. v3: every waiting UID without a server. */
    for (int i = 0; i < nwaiting; i++) {
        if (protocol != 3 && running()) break;
        if (!server_of_uid(waiting[i].cred.uid))
            spawn_server(waiting[i].cred.uid, waiting[i].cred.gid);
    }
}

static void server_report(struct server *srv, const char *line) {
    if (strcmp(line, "ready") == 0) {
        srv->ready = 1;
        logc("Server %ld ready", (long)srv->pid);
        answer_waiting();
    } else if (strncmp(line, "clients ", 8) == 0) {
        srv->nclients = atoi(line + 8);
        const char *pids = strchr(line + 8, ' ');
        snprintf(srv->clients, sizeof srv->clients, "%s", pids ? pids + 1 : "");
        if (srv->draining && srv->nclients == 0) tell_server(srv, "exit\n");
    } else if (strncmp(line, "error ", 6) == 0) {
        logc("Server %ld: %s", (long)srv->pid, line + 6);
    }
}

/* Reads what a server reported; returns -1 once it has gone. */
static int read_server(struct server *srv) {
    for (;;) {
        ssize_t r = read(srv->rep, srv->buf + srv->len, sizeof srv->buf - 1 - srv->len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return 0;
        if (r <= 0) return -1;
        srv->len += (size_t)r;
        srv->buf[srv->len] = '\0';
        char *nl;
        while ((nl = strchr(srv->buf, '\n'))) {
            *nl = '\0';
            server_report(srv, srv->buf);
            if (!srv->pid) return 0;
            srv->len -= (size_t)(nl + 1 - srv->buf);
            memmove(srv->buf, nl + 1, srv->len + 1);
        }
        if (srv->len >= sizeof srv->buf - 1) srv->len = 0;
    }
}

/* A CUDA client asks for a server (the man page's DESCRIPTION). */
static void client_hello(int fd) {
    struct ucred cred;
    if (peer(fd, &cred) != 0 || nwaiting == MAX_WAITING) {
        write_str(fd, "error cannot serve this client\n");
        close(fd);
        return;
    }
    waiting[nwaiting].fd = fd;
    waiting[nwaiting].cred = cred;
    nwaiting++;
    logc("Client %ld uid %u asks for a server", (long)cred.pid, (unsigned)cred.uid);
    struct server *srv = running();
    if (protocol == 3) {
        /* MPS v3: each UID its own server, `uid_<uid>`, beside the others'. */
        if (!server_of_uid(cred.uid)) spawn_server(cred.uid, cred.gid);
    } else if (!srv) {
        spawn_server(cred.uid, cred.gid);
    } else if (srv->uid != cred.uid) {
        logc("Client %ld uid %u queued: server %ld of uid %u has %d clients", (long)cred.pid,
             (unsigned)cred.uid, (long)srv->pid, (unsigned)srv->uid, srv->nclients);
        if (!srv->draining) {
            srv->draining = 1;
            if (srv->ready && srv->nclients == 0) tell_server(srv, "exit\n");
        }
    }
    answer_waiting();
}

#include "mps-commands.h"

static void shut_down(void) {
    if (listen_fd >= 0) close(listen_fd);
    listen_fd = -1;
    while (nwaiting > 0) drop_waiter(0, NULL);
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (!servers[i].pid) continue;
        tell_server(&servers[i], "exit\n");
        server_gone(&servers[i]);
        while (nwaiting > 0) drop_waiter(0, NULL);
    }
    unlink(sock_path);
    unlink(pid_path);
    logc("Shutdown");
}

static void serve(void) {
    while (!terminate) {
        struct pollfd p[1 + MAX_SERVERS + MAX_WAITING];
        struct server *polled[MAX_SERVERS];
        int n = 0, nservers = 0;
        p[n++] = (struct pollfd){listen_fd, POLLIN, 0};
        for (int i = 0; i < MAX_SERVERS; i++)
            if (servers[i].pid) {
                polled[nservers++] = &servers[i];
                p[n++] = (struct pollfd){servers[i].rep, POLLIN, 0};
            }
        int first_waiter = n;
        for (int i = 0; i < nwaiting; i++) p[n++] = (struct pollfd){waiting[i].fd, POLLIN, 0};
        if (poll(p, (nfds_t)n, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        /* A waiting client that hung up (or spoke out of turn) gives up its place. */
        for (int i = nwaiting - 1; i >= 0; i--)
            if (p[first_waiter + i].revents) drop_waiter(i, NULL);
        for (int i = 0; i < nservers; i++)
            if (p[1 + i].revents && polled[i]->pid && read_server(polled[i]) < 0)
                server_gone(polled[i]);
        if (!(p[0].revents & POLLIN)) continue;
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        /* A client that connects and says nothing does not hold the daemon for long. */
        char line[MAX_LINE];
        if (read_line(fd, line, sizeof line, 2000) < 0 && !line[0]) {
            close(fd);
            continue;
        }
        if (strcmp(line, CLIENT_HELLO) == 0) {
            client_hello(fd);
            continue;
        }
        int quit = handle(fd, line);
        if (quit) shut_down();
        close(fd);
        if (quit) _exit(0);
    }
    shut_down();
    _exit(terminate ? 0 : 1);
}
