/*
 * Load from the official RocketMQ C++ client (librocketmq 1.2.x, as shipped in the PyPI wheel
 * rocketmq==0.4.4), through its C API, without Python in the sending or consuming path.
 *
 *   cpp_load produce NAMESRV TOPIC THREADS SECONDS SIZE START_AT_EPOCH_S
 *       THREADS threads each send SIZE-byte messages synchronously until SECONDS after
 *       START_AT; prints {"sent":..,"failed":..,"rt_sum_us":..,"rt_max_us":..,"first_failure":".."}
 *   cpp_load consume NAMESRV TOPIC GROUP COUNT TIMEOUT_S THREADS
 *       a clustering push consumer counts deliveries until COUNT or TIMEOUT;
 *       prints {"consumed":..,"seconds":..} (first to last delivery)
 *
 * Built by bench/broker_bench.py with gcc against the wheel's librocketmq.so; the prototypes
 * below are the library's C API (CProducer.h / CPushConsumer.h / CMessage*.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct { int sendStatus; char msgId[256]; long long offset; } CSendResult;

extern void *CreateProducer(const char *group);
extern int SetProducerNameServerAddress(void *producer, const char *addr);
extern int SetProducerInstanceName(void *producer, const char *name);
extern int SetProducerSendMsgTimeout(void *producer, int timeout_ms);
extern int StartProducer(void *producer);
extern int ShutdownProducer(void *producer);
extern void *CreateMessage(const char *topic);
extern int SetByteMessageBody(void *msg, const char *body, int len);
extern int DestroyMessage(void *msg);
extern int SendMessageSync(void *producer, void *msg, CSendResult *result);
extern const char *GetLatestErrorMessage(void);

extern void *CreatePushConsumer(const char *group);
extern int SetPushConsumerNameServerAddress(void *consumer, const char *addr);
extern int SetPushConsumerThreadCount(void *consumer, int count);
extern int SetPushConsumerInstanceName(void *consumer, const char *name);
extern int Subscribe(void *consumer, const char *topic, const char *expression);
extern int RegisterMessageCallback(void *consumer, int (*callback)(void *, void *));
extern int StartPushConsumer(void *consumer);
extern int ShutdownPushConsumer(void *consumer);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct sender {
    pthread_t thread;
    void *producer;
    const char *topic;
    const char *body;
    int size;
    double stop_at;
    long long sent, failed, rt_sum_us, rt_max_us;
};

/* What the first failed send said (the client's own message), reported with the counts. */
static atomic_int failure_noted;
static char first_failure[512];

static void note_failure(int status) {
    if (atomic_exchange(&failure_noted, 1)) return;
    const char *why = GetLatestErrorMessage();
    snprintf(first_failure, sizeof first_failure, "send status %d: %s", status, why ? why : "");
}

/* first_failure as a JSON string body: quotes, backslashes and control characters replaced. */
static const char *json_safe(char *text) {
    for (char *p = text; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = ' ';
    return text;
}

static void *send_loop(void *arg) {
    struct sender *s = arg;
    void *msg = CreateMessage(s->topic);
    SetByteMessageBody(msg, s->body, s->size);
    CSendResult result;
    while (now_s() < s->stop_at) {
        double t0 = now_s();
        if (SendMessageSync(s->producer, msg, &result) == 0 && result.sendStatus == 0) {
            long long rt = (long long)((now_s() - t0) * 1e6);
            s->sent++;
            s->rt_sum_us += rt;
            if (rt > s->rt_max_us) s->rt_max_us = rt;
        } else {
            s->failed++;
            note_failure(result.sendStatus);
        }
    }
    DestroyMessage(msg);
    return NULL;
}

/* CPU seconds (user + system) this process has used, all threads included. */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int produce(int argc, char **argv) {
    if (argc != 8) return 2;
    const char *namesrv = argv[2], *topic = argv[3];
    int threads = atoi(argv[4]), size = atoi(argv[6]);
    double seconds = atof(argv[5]), start_at = atof(argv[7]);
    char *body = malloc(size);
    memset(body, 'x', size);
    char name[64];
    snprintf(name, sizeof name, "cpp-load-%d", getpid());
    void *producer = CreateProducer("cpp-load-producer");
    SetProducerNameServerAddress(producer, namesrv);
    SetProducerInstanceName(producer, name);
    SetProducerSendMsgTimeout(producer, 10000);
    if (StartProducer(producer) != 0) return 1;
    void *warm = CreateMessage(topic);
    SetByteMessageBody(warm, body, size);
    CSendResult result;
    SendMessageSync(producer, warm, &result); /* routes resolved before the clock starts */
    DestroyMessage(warm);
    while (now_s() < start_at) usleep(1000);
    double cpu_before = cpu_s();
    struct sender *senders = calloc(threads, sizeof *senders);
    for (int i = 0; i < threads; i++) {
        senders[i] = (struct sender){.producer = producer, .topic = topic, .body = body, .size = size,
                                     .stop_at = start_at + seconds};
        pthread_create(&senders[i].thread, NULL, send_loop, &senders[i]);
    }
    long long sent = 0, failed = 0, rt_sum = 0, rt_max = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(senders[i].thread, NULL);
        sent += senders[i].sent;
        failed += senders[i].failed;
        rt_sum += senders[i].rt_sum_us;
        if (senders[i].rt_max_us > rt_max) rt_max = senders[i].rt_max_us;
    }
    double cpu_used = cpu_s() - cpu_before;
    printf("{\"sent\": %lld, \"failed\": %lld, \"rt_sum_us\": %lld, \"rt_max_us\": %lld, \"cpu_s\": %.6f, "
           "\"first_failure\": \"%s\"}\n",
           sent, failed, rt_sum, rt_max, cpu_used, json_safe(first_failure));
    fflush(stdout);
    ShutdownProducer(producer);
    return 0;
}

static atomic_llong consumed;
static long long target;
static _Atomic double first_at, last_at;

static int on_message(void *consumer, void *msg) {
    (void)consumer;
    (void)msg;
    double t = now_s();
    long long n = atomic_fetch_add(&consumed, 1) + 1;
    if (n == 1) first_at = t;
    if (n == target) last_at = t;
    return 0;
}

static int consume(int argc, char **argv) {
    if (argc != 8) return 2;
    const char *namesrv = argv[2], *topic = argv[3], *group = argv[4];
    target = atoll(argv[5]);
    double timeout = atof(argv[6]);
    void *consumer = CreatePushConsumer(group);
    SetPushConsumerNameServerAddress(consumer, namesrv);
    SetPushConsumerThreadCount(consumer, atoi(argv[7]));
    Subscribe(consumer, topic, "*");
    RegisterMessageCallback(consumer, on_message);
    if (StartPushConsumer(consumer) != 0) return 1;
    double deadline = now_s() + timeout;
    while (atomic_load(&consumed) < target && now_s() < deadline) usleep(2000);
    long long n = atomic_load(&consumed);
    double end = n >= target ? last_at : now_s();
    printf("{\"consumed\": %lld, \"seconds\": %.6f}\n", n, n ? end - first_at : 0.0);
    fflush(stdout);
    ShutdownPushConsumer(consumer);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "produce") == 0) return produce(argc, argv);
    if (argc > 1 && strcmp(argv[1], "consume") == 0) return consume(argc, argv);
    fprintf(stderr, "usage: cpp_load produce|consume ...\n");
    return 2;
}
