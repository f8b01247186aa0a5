// test_server.c — build/tools/server: its request parser and guards called directly, its flags
// through the binary, and the whole server through the official openai Python client
// (tests/server/test_openai_client.py) and raw sockets (tests/server/test_backpressure.py,
// test_hardening.py, test_load.py), all run in the venv `make test` builds: $EMX_BUILD/server-venv.
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "run_util.h"
#include "tokenizer/tok_utf8.h"
#include "tools/server/engine.h"
#include "tools/server/engine_output.h"
#include "tools/server/guard.h"
#include "tools/server/request.h"
#include "tools/server/tool_calls.h"

static const char *build_dir(void) {
    const char *b = getenv("EMX_BUILD");
    return b && *b ? b : "build";
}

static void parse_ok(const char *body, int kind, SrvRequest *r) {
    SrvError e;
    cr_assert_eq(srv_request_parse(body, strlen(body), kind, r, &e), 0, "%s: %s", body, e.message);
}

static void parse_bad(const char *body, int kind, const char *param, const char *needle) {
    SrvRequest r;
    SrvError e;
    cr_assert_eq(srv_request_parse(body, strlen(body), kind, &r, &e), -1, "accepted: %s", body);
    cr_assert_eq(e.status, 400, "%s", body);
    cr_assert(strstr(e.message, needle), "%s: '%s' lacks '%s'", body, e.message, needle);
    cr_assert(!strchr(e.message, '\n'));
    if (param) cr_assert(e.param && !strcmp(e.param, param), "%s: param %s", body, e.param ? e.param : "NULL");
    srv_request_free(&r);
}

Test(server, parse_chat_fields) {
    SrvRequest r;
    parse_ok("{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"S\"},{\"role\":\"user\",\"content\":"
             "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],\"max_tokens\":5,\"temperature\":0,"
             "\"top_p\":0.5,\"seed\":42,\"stop\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"logprobs\":true,\"top_logprobs\":3,\"entropix\":{\"sampler\":\"greedy\",\"metrics\":true},\"user\":\"u\"}",
             SRV_CHAT, &r);
    cr_assert_eq(r.n_messages, 2);
    cr_assert_str_eq(r.messages[0].role, "system");
    cr_assert_str_eq(r.messages[1].content, "ab");
    cr_assert(r.max_tokens == 5 && r.has_temperature && r.temperature == 0 && r.top_p == 0.5 && r.seed == 42);
    cr_assert(r.n_stop == 1 && !strcmp(r.stop[0], "x") && r.stream && r.include_usage);
    cr_assert(r.logprobs && r.top_logprobs == 3 && r.sampler == EMX_SAMPLER_GREEDY && r.metrics);
    srv_request_free(&r);
    parse_ok("{\"model\":\"m\",\"prompt\":[\"p\"],\"logprobs\":2,\"stop\":null,\"seed\":null}", SRV_COMPLETION, &r);
    cr_assert(!strcmp(r.prompt, "p") && r.logprobs && r.top_logprobs == 2 && !r.has_seed && r.max_tokens == -1);
    cr_assert(!r.draw_seed);
    srv_request_free(&r);
    // seed -1, as llama.cpp's clients send it: a seed drawn for the request (even over the server's -s)
    parse_ok("{\"prompt\":\"p\",\"seed\":-1}", SRV_COMPLETION, &r);
    cr_assert(!r.has_seed && r.draw_seed);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"seed\":9007199254740992}", SRV_COMPLETION, &r);
    cr_assert(r.has_seed && r.seed == 9007199254740992ull && !r.draw_seed);
    srv_request_free(&r);
    // model is optional (one model is served, as llama.cpp's server has it): absent or null is NULL
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", SRV_CHAT, &r);
    cr_assert(r.model == NULL && r.n_messages == 1);
    srv_request_free(&r);
    parse_ok("{\"model\":null,\"prompt\":\"p\"}", SRV_COMPLETION, &r);
    cr_assert(r.model == NULL && !strcmp(r.prompt, "p"));
    srv_request_free(&r);
}

Test(server, parse_rejects_each_bad_field) {
    const int C = SRV_CHAT, P = SRV_COMPLETION;
    parse_bad("{\"model\":\"m\"", C, NULL, "not valid JSON");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\"} x", P, NULL, "after its JSON value");
    parse_bad("[]", C, NULL, "must be a JSON object");
    parse_bad("{\"messages\":[]}", C, "messages", "1 to");  // model is optional: the messages are what is wrong
    parse_bad("{\"model\":1,\"prompt\":\"p\"}", P, "model", "must be a string");
    parse_bad("{\"model\":\"m\",\"messages\":[]}", C, "messages", "1 to");
    parse_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", C, "messages", "tool_call_id");
    // a quoted client value with a newline stays one line (parse_bad asserts no '\n')
    parse_bad("{\"messages\":[{\"role\":\"us\\nx\",\"content\":\"x\"}]}", C, "messages", "'us\\x0ax' is not supported");
    parse_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":3}]}", C, "messages", "content");
    parse_bad("{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", P, "prompt", "batches");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"max_tokens\":0}", P, "max_tokens", "must be in");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"max_tokens\":1.5}", P, "max_tokens", "integer");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"temperature\":2.5}", P, "temperature", "[0, 2]");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"temperature\":\"hot\"}", P, "temperature", "a number");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"top_p\":0}", P, "top_p", "(0, 1]");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"seed\":-2}", P, "seed", "must be in [-1, ");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"n\":17}", P, "n", "must be in [1, 16]");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", P, "stop", "at most 4");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"stop\":[\"\"]}", P, "stop", "1 to");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"stream\":1}", P, "stream", "boolean");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"logprobs\":21}", P, "logprobs", "must be in");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"echo\":true}", P, "echo", "not supported");
    parse_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", C,
              "top_logprobs", "needs logprobs");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"stream_options\":{}}", P, "stream_options", "needs stream");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"presence_penalty\":3}", P, "presence_penalty", "must be in");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"repetition_penalty\":0}", P, "repetition_penalty", "must be in (0");
    parse_bad("{\"prompt\":\"p\",\"repetition_penalty\":1.1,\"repeat_penalty\":1.1}", P, "repeat_penalty", "give one");
    parse_bad("{\"prompt\":\"p\",\"logit_bias\":[1]}", P, "logit_bias", "must be an object");
    parse_bad("{\"prompt\":\"p\",\"logit_bias\":{\"x1\":1}}", P, "logit_bias", "'x1' is not a token id");
    parse_bad("{\"prompt\":\"p\",\"logit_bias\":{\"-1\":1}}", P, "logit_bias", "is not a token id");
    parse_bad("{\"prompt\":\"p\",\"logit_bias\":{\"5\":101}}", P, "logit_bias", "[-100, 100]");
    parse_bad("{\"prompt\":\"p\",\"top_k\":5,\"entropix\":{\"top_k\":4}}", P, "top_k", "given twice");
    parse_bad("{\"prompt\":\"p\",\"min_p\":2}", P, "min_p", "must be in");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"entropix\":{\"sampler\":\"pool\"}}", P, "entropix.sampler",
              "agents");
    parse_bad("{\"model\":\"m\",\"prompt\":\"p\",\"entropix\":{\"profile\":\"/etc/passwd\"}}", P, "entropix.profile",
              "built-in");
    parse_bad("{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}", P, NULL, "\\u0000");
}

// A key twice in one object is refused at any depth, named with its path: Python's json (OpenAI's
// and vLLM's servers) keeps the last value and cJSON the first, so either answer would surprise.
Test(server, parse_rejects_duplicate_keys) {
    const int C = SRV_CHAT, P = SRV_COMPLETION;
    parse_bad("{\"prompt\":\"p\",\"temperature\":0,\"temperature\":1}", P, "temperature", "duplicate key 'temperature'");
    parse_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\","
              "\"content\":\"b\"}]}", C, "messages[1].content", "duplicate key 'content' at messages[1].content");
    parse_bad("{\"prompt\":\"p\",\"x\":[[1,{\"a\":{\"b\":1,\"b\":2}}]]}", P, "x[0][1].a.b", "duplicate key 'b'");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"metrics\":true,\"metrics\":false}}", P, "entropix.metrics",
              "duplicate key 'metrics'");
    char many[4096];  // an object of many keys (sorted, not compared pairwise), the duplicate last
    int o = snprintf(many, sizeof many, "{\"prompt\":\"p\",\"k\":{");
    for (int i = 0; i < 200; i++) o += snprintf(many + o, sizeof many - (size_t)o, "\"k%d\":%d,", i, i);
    snprintf(many + o, sizeof many - (size_t)o, "\"k7\":0}}");
    parse_bad(many, P, "k.k7", "duplicate key 'k7'");
    SrvRequest r;  // the same key in different objects is no duplicate
    parse_ok("{\"prompt\":\"p\",\"stop\":\"s\",\"x\":{\"stop\":1,\"y\":{\"stop\":2}},\"z\":[{\"a\":1},{\"a\":2}]}", P,
             &r);
    srv_request_free(&r);
}

// best_of (legacy completions): at least n, never streamed past n; chat keeps ignoring it (OpenAI
// has no best_of there, and unknown fields are ignored).
Test(server, parse_best_of) {
    SrvRequest r;
    parse_ok("{\"prompt\":\"p\",\"n\":2,\"best_of\":5}", SRV_COMPLETION, &r);
    cr_assert(r.n == 2 && r.best_of == 5);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"n\":3}", SRV_COMPLETION, &r);
    cr_assert(r.n == 3 && r.best_of == 3, "best_of absent: n");
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"best_of\":2,\"n\":2,\"stream\":true}", SRV_COMPLETION, &r);
    cr_assert(r.best_of == 2 && r.stream);
    srv_request_free(&r);
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"best_of\":\"any\"}", SRV_CHAT, &r);
    cr_assert(r.best_of == 1);
    srv_request_free(&r);
    parse_bad("{\"prompt\":\"p\",\"n\":3,\"best_of\":2}", SRV_COMPLETION, "best_of", "at least n");
    parse_bad("{\"prompt\":\"p\",\"best_of\":2,\"stream\":true}", SRV_COMPLETION, "best_of", "cannot be streamed");
    parse_bad("{\"prompt\":\"p\",\"best_of\":17}", SRV_COMPLETION, "best_of", "must be in [1, 16]");
    parse_bad("{\"prompt\":\"p\",\"best_of\":1.5}", SRV_COMPLETION, "best_of", "integer");
}

// The sampling fields llama-server and vLLM take at the top level, and the logit rules.
Test(server, parse_sampling_rules) {
    SrvRequest r;
    parse_ok("{\"prompt\":\"p\",\"top_k\":7,\"min_p\":0.2,\"presence_penalty\":-0.5,\"frequency_penalty\":1.5,"
             "\"repeat_penalty\":1.3,\"repeat_last_n\":-1,\"logit_bias\":{\"17\":-100,\"3\":2.5}}",
             SRV_COMPLETION, &r);
    cr_expect(r.has_top_k && r.top_k == 7 && r.has_min_p && r.min_p == 0.2);
    cr_expect(r.rules.penalties.presence_penalty == -0.5f && r.rules.penalties.frequency_penalty == 1.5f);
    cr_expect(r.rules.penalties.repeat_penalty == 1.3f && r.rules.penalties.repeat_last_n == -1);
    cr_expect(r.rules_given == (SRV_RULE_PRESENCE | SRV_RULE_FREQUENCY | SRV_RULE_REPEAT | SRV_RULE_REPEAT_LAST_N |
                                SRV_RULE_BIAS), "given %d", r.rules_given);
    cr_expect(r.rules.n_bias == 2 && r.rules.bias[0].id == 17 && r.rules.bias[0].bias == -100 && r.rules.bias[1].id == 3 &&
              r.rules.bias[1].bias == 2.5f);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"repetition_penalty\":1.1,\"entropix\":{\"top_k\":4}}", SRV_COMPLETION, &r);
    cr_expect(r.has_top_k && r.top_k == 4 && r.rules.penalties.repeat_penalty == 1.1f && r.rules.penalties.repeat_last_n == 64);
    cr_expect(r.rules_given == SRV_RULE_REPEAT && r.rules.n_bias == 0);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\"}", SRV_COMPLETION, &r);
    cr_expect(r.rules_given == 0 && !emx_logit_rules_active(&r.rules), "no field: no rule");
    srv_request_free(&r);
}

// The agent pool's options: eval's names, ./run's defaults and ranges.
Test(server, parse_agents_fields) {
    SrvRequest r;
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"sampler\":\"agents\"}}", SRV_COMPLETION, &r);
    cr_assert_eq(r.sampler, EMX_SAMPLER_AGENTS);
    cr_assert(r.agents.n_agents == 8 && r.agents.lookahead == 1 && r.agents.workers == 1 && !r.agents.agent_configs);
    cr_assert(r.agents.check_every == 0 && r.agents.critic_default_off, "no critic unless asked, as ./run");
    srv_request_free(&r);
    // keys of the pool imply the sampler (./run's rule); each value lands in its field
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"n\":3,\"lookahead\":2,\"workers\":3,\"check_every\":4,"
             "\"window\":32,\"margin\":-1000,\"rollback\":2,\"max_rollbacks\":1,\"metrics\":true}}",
             SRV_COMPLETION, &r);
    cr_assert(r.sampler == EMX_SAMPLER_AGENTS && r.agents.n_agents == 3 && r.agents.lookahead == 2 && r.agents.workers == 3);
    cr_assert(r.agents.check_every == 4 && r.agents.check_every_given && !r.agents.critic_default_off);
    cr_assert(r.agents.critic_window == 32 && r.agents.critic_margin == -1000.0f && r.agents.rollback == 2);
    cr_assert(r.agents.max_rollbacks == 1 && r.metrics);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"agent_configs\":\"0.3:5,1.2:0\",\"critic\":true,"
             "\"critic_margin\":0.5,\"critic_window\":16}}", SRV_COMPLETION, &r);
    cr_assert(!strcmp(r.agents.agent_configs, "0.3:5,1.2:0") && r.agents.check_every == 5 && r.agents.critic_window == 16);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"agents\":2,\"critic\":false,\"check_every\":0}}", SRV_COMPLETION, &r);
    cr_assert(r.agents.n_agents == 2 && r.agents.check_every == 0);
    srv_request_free(&r);
}

Test(server, parse_agents_rejects_each_bad_value) {
    const int P = SRV_COMPLETION;
    char body[512];
    // key, value, the param named, a word of the message
    const char *cases[][4] = {
        {"n", "0", "entropix.n", "out of range [1, 64]"},
        {"n", "1000", "entropix.n", "out of range [1, 64]"},
        {"agents", "65", "entropix.agents", "out of range"},
        {"n", "2.5", "entropix.n", "integer"},
        {"n", "\"3\"", "entropix.n", "integer, not a string"},
        {"n", "1e300", "entropix.n", "integer"},
        {"lookahead", "-1", "entropix.lookahead", "out of range [1, 16]"},
        {"lookahead", "17", "entropix.lookahead", "out of range"},
        {"workers", "0", "entropix.workers", "out of range"},
        {"workers", "9", "entropix.workers", "at most 8"},
        {"check_every", "-1", "entropix.check_every", "out of range"},
        {"window", "0", "entropix.window", "out of range"},
        {"critic_window", "true", "entropix.critic_window", "integer"},
        {"margin", "5000", "entropix.margin", "--critic-margin"},
        {"margin", "\"x\"", "entropix.margin", "a number"},
        {"rollback", "0", "entropix.rollback", "out of range"},
        {"max_rollbacks", "-2", "entropix.max_rollbacks", "out of range"},
        {"critic", "\"on\"", "entropix.critic", "boolean"},
        {"agent_configs", "\"0.3\"", "entropix.agent_configs", "not T:k"},
        {"agent_configs", "\"\"", "entropix.agent_configs", "--agent-configs"},
        {"agent_configs", "3", "entropix.agent_configs", "a string"},
        {"devices", "\"cuda:0\"", "entropix.devices", "one model"},
        {"critic_model", "\"/tmp/m.bin\"", "entropix.critic_model", "one model"},
        {"lookahed", "2", "entropix", "entropix.lookahed is not an option"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"p\",\"entropix\":{\"sampler\":\"agents\",\"%s\":%s}}", cases[i][0],
                 cases[i][1]);
        parse_bad(body, P, cases[i][2], cases[i][3]);
    }
    // what holds only for the options together
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"n\":2,\"workers\":3}}", P, "entropix.workers", "more than the 2 agents");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"n\":2,\"agents\":3}}", P, "entropix.agents", "give one");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"critic\":false,\"check_every\":4}}", P, "entropix.critic",
              "check_every is 4");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"sampler\":\"greedy\",\"n\":3}}", P, "entropix.n",
              "needs sampler agents");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"top_p\":0.5}}", P, "entropix", "not an option");
}

// The branching decoder's keys: eval's names, ./run's defaults, lookahead the pool's unless the
// sampler is branch, an alphabet entry holding a comma (./run's CSV could not), logprobs refused.
Test(server, parse_branch_fields) {
    SrvRequest r;
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"sampler\":\"branch\"}}", SRV_COMPLETION, &r);
    cr_assert(r.sampler == EMX_SAMPLER_BRANCH && r.branch.k == 5 && r.branch.max_forks == 1 && r.branch.gate == 0.1f);
    cr_assert(r.branch.entropy_bits == 2.0 && r.branch.lookahead == 0 && !r.branch.cue && r.branch.n_alphabet == 0);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"tau\":0.5,\"k\":3,\"forks\":2,\"gate\":0.25,\"lookahead\":4,\"rule\":"
             "\"margin\",\"cue\":\"Answer:\",\"alphabet\":[\"1, 2\",\"B\"]}}", SRV_COMPLETION, &r);
    cr_assert(r.sampler == EMX_SAMPLER_BRANCH && r.branch.entropy_bits == 0.5 && r.branch.k == 3 && r.branch.max_forks == 2);
    cr_assert(r.branch.gate == 0.25f && r.branch.lookahead == 4 && r.branch.rule == EMX_BRANCH_RULE_MARGIN);
    cr_assert(!strcmp(r.branch.cue, "Answer:") && r.branch.n_alphabet == 2 && !strcmp(r.branch.alphabet[0], "1, 2"));
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"sampler\":\"branch\",\"lookahead\":2,\"entropy\":1,\"answer_cue\":\"So\","
             "\"answer_alphabet\":[\"x\"]}}", SRV_COMPLETION, &r);
    cr_assert(r.branch.lookahead == 2 && r.branch.entropy_bits == 1 && !strcmp(r.branch.cue, "So") && r.branch.n_alphabet == 1);
    srv_request_free(&r);
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"lookahead\":2}}", SRV_COMPLETION, &r);  // the pool's, as before
    cr_assert(r.sampler == EMX_SAMPLER_AGENTS && r.agents.lookahead == 2);
    srv_request_free(&r);
    const int P = SRV_COMPLETION;
    parse_bad("{\"prompt\":\"p\",\"logprobs\":0,\"entropix\":{\"k\":3}}", P, "logprobs", "not available with");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"k\":3,\"metrics\":true}}", P, "entropix.metrics", "not available with");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"k\":17}}", P, "entropix.k", "entropix.k: --branch-k: 17 is out of range");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"alphabet\":[\"A\",3]}}", P, "entropix.alphabet",
              "entropix.alphabet[1] must be a string, not a number");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"cue\":\"a\",\"answer_cue\":\"b\"}}", P, "entropix.answer_cue", "give one");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"sampler\":\"agents\",\"rule\":\"prob\"}}", P, "entropix.rule",
              "needs sampler branch, not agents");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"k\":3,\"workers\":2}}", P, "entropix.workers", "needs sampler agents");
}

// Valid UTF-8 (every maximal subpart valid, by tok_utf8_next) and one line.
static int valid_utf8_line(const char *s) {
    const size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const int k = tok_utf8_next((const uint8_t *)s + i, n - i, &cp);
        if (k <= 0 || cp < 0x20) return 0;
        i += (size_t)k;
    }
    return 1;
}

// A client's bytes quoted in an error: never cut inside a character, invalid bytes escaped
// (hand-written expectations), and the messages that quote them valid UTF-8.
Test(server, quote_and_messages_are_utf8) {
    char q[64];
    cr_assert_str_eq(srv_quote("abc", 3, 40, q, sizeof q), "abc");
    cr_assert_str_eq(srv_quote("a\xff\n\\b", 5, 40, q, sizeof q), "a\\xff\\x0a\\\\b");
    // "é" is 2 bytes: a bound of 3 keeps one, never half of the second
    cr_assert_str_eq(srv_quote("\xc3\xa9\xc3\xa9", 4, 3, q, sizeof q), "\xc3\xa9...");
    cr_assert_str_eq(srv_quote("\xe2\x82", 2, 40, q, sizeof q), "\\xe2\\x82");  // a truncated character
    // a role of 30 "é" (60 bytes) quoted at 40 bytes: 20 whole characters
    char body[512] = "{\"messages\":[{\"role\":\"";
    for (int i = 0; i < 30; i++) strcat(body, "\xc3\xa9");
    strcat(body, "\xff\",\"content\":\"x\"}]}");
    SrvRequest r;
    SrvError e;
    cr_assert_eq(srv_request_parse(body, strlen(body), SRV_CHAT, &r, &e), -1);
    cr_assert(valid_utf8_line(e.message), "%s", e.message);
    char *j = srv_error_json(&e);
    cr_assert(j && valid_utf8_line(j), "%s", j);
    free(j);
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"sampler\":\"\xff\xfe\"}}", SRV_COMPLETION, "entropix.sampler",
              "'\\xff\\xfe' is not one of");
    // 1e309 is infinity to the parser: a finite number is asked for, not "a number, not a number"
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"margin\":1e309}}", SRV_COMPLETION, "entropix.margin",
              "entropix.margin is too large: it must be a finite number");
}

// The pool's options bounded beyond ./run's ranges (request.h): one request's cost.
Test(server, pool_options_bounded) {
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"n\":2,\"check_every\":1,\"window\":1,\"margin\":-1000,"
              "\"max_rollbacks\":1000000}}", SRV_COMPLETION, "entropix.max_rollbacks",
              "entropix.max_rollbacks is 1000000; this server allows at most 16");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"n\":33}}", SRV_COMPLETION, "entropix.n", "at most 32");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"rollback\":65}}", SRV_COMPLETION, "entropix.rollback", "at most 64");
    parse_bad("{\"prompt\":\"p\",\"entropix\":{\"window\":2049}}", SRV_COMPLETION, "entropix.window", "at most 2048");
    SrvRequest r;
    parse_ok("{\"prompt\":\"p\",\"entropix\":{\"n\":32,\"rollback\":64,\"max_rollbacks\":16,\"window\":2048,"
             "\"check_every\":1}}", SRV_COMPLETION, &r);
    cr_assert(r.agents.n_agents == 32 && r.agents.max_rollbacks == 16 && r.agents.critic_window == 2048);
    srv_request_free(&r);
}

// The origin, the key and the media type (guard.h), against hand-written cases.
Test(server, guard_origin_key_type) {
    SrvGuard g = {.cors = {"http://app.example:3000"}, .n_cors = 1, .api_key = "k3y"};
    const char *allow = "x";
    SrvError e;
    cr_assert_eq(srv_guard_origin(&g, NULL, "127.0.0.1:8080", &allow, &e), 0);  // no Origin: not a browser's
    cr_assert_null(allow);
    cr_assert_eq(srv_guard_origin(&g, "http://127.0.0.1:8080", "127.0.0.1:8080", &allow, &e), 0);  // the page
    cr_assert_null(allow);
    cr_assert_eq(srv_guard_origin(&g, "http://app.example:3000", "127.0.0.1:8080", &allow, &e), 0);
    cr_assert_str_eq(allow, "http://app.example:3000");
    const char *foreign[] = {"http://evil.example", "null", "http://127.0.0.1:8081", "https://127.0.0.1:8080",
                             "http://app.example:3000.evil"};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        cr_assert_eq(srv_guard_origin(&g, foreign[i], "127.0.0.1:8080", &allow, &e), -1, "%s", foreign[i]);
        cr_assert(e.status == 403 && !strcmp(e.code, "origin_not_allowed"), "%s", foreign[i]);
    }
    SrvGuard any = {.cors = {"*"}, .n_cors = 1};
    cr_assert_eq(srv_guard_origin(&any, "http://evil.example", "h", &allow, &e), 0);
    const char *ok[] = {"Bearer k3y", "bearer k3y", "BEARER  k3y"}, *bad[] = {NULL, "k3y", "Bearer k3", "Bearer k3yy",
                                                                            "Basic k3y", "Bearerk3y", "Bearer "};
    for (size_t i = 0; i < 3; i++) cr_assert(srv_guard_auth(&g, ok[i]), "%s", ok[i]);
    for (size_t i = 0; i < 7; i++) cr_assert(!srv_guard_auth(&g, bad[i]), "%s", bad[i] ? bad[i] : "NULL");
    cr_assert(srv_guard_auth(&any, NULL), "no key: everyone");
    cr_assert_eq(srv_guard_json_type("application/json", &e), 0);
    cr_assert_eq(srv_guard_json_type("Application/JSON; charset=utf-8", &e), 0);
    const char *types[] = {NULL, "text/plain", "application/jsonx", "application/x-www-form-urlencoded", "multipart/form-data"};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(srv_guard_json_type(types[i], &e), -1, "%s", types[i] ? types[i] : "NULL");
        cr_assert(e.status == 415 && valid_utf8_line(e.message), "%s", e.message);
    }
}

Test(server, stop_holdback) {
    char *stop[] = {"abc", "xy"};
    long match;
    cr_assert_eq(srv_stop_holdback("hello ab", 8, stop, 2, &match), 2);
    cr_assert_eq(match, -1);
    cr_assert_eq(srv_stop_holdback("hello x", 7, stop, 2, &match), 1);
    cr_assert_eq(srv_stop_holdback("hexy abc", 8, stop, 2, &match), 0);
    cr_assert_eq(match, 2);
}

// What the generation emits, piece by piece: each piece's text and its entries' token texts.
typedef struct {
    char text[8][32], lp[8][64], mx[8][64];
    int n;
} Emitted;

static void entry_tokens(const cJSON *list, char *out, size_t cap) {
    const cJSON *e;
    out[0] = 0;
    cJSON_ArrayForEach(e, list) {
        strncat(out, cJSON_GetStringValue(cJSON_GetObjectItem(e, "token")), cap - strlen(out) - 2);
        strcat(out, "|");
    }
}

static int capture(void *user, const char *text, size_t len, cJSON *logprobs, cJSON *metrics) {
    Emitted *m = user;
    cr_assert(m->n < 8 && len < 32);
    snprintf(m->text[m->n], 32, "%.*s", (int)len, text);
    entry_tokens(logprobs, m->lp[m->n], 64);
    entry_tokens(metrics, m->mx[m->n], 64);
    m->n++;
    cJSON_Delete(logprobs), cJSON_Delete(metrics);
    return 0;
}

// A stop string cuts the logprobs where it cuts the text: the tokens wholly inside the cut are
// dropped, one cut inside keeps its whole bytes; each entry goes out with the piece that holds
// its token's first byte. The metrics keep every token. (The tokens of "... and unforgiving".)
Test(server, stop_string_cuts_the_logprobs) {
    SrvRequest r = {.n_stop = 1};
    r.stop[0] = "unforg";
    Emitted m = {0};
    Gen g = {.r = &r, .emit = capture, .emit_user = &m};
    const char *toks[] = {" a", " and", " un", "for", "giving", " x"};
    int stopped_at = -1;
    for (int i = 0; i < 6 && stopped_at < 0; i++) {
        if (!g.logprobs) g.logprobs = cJSON_CreateArray();
        if (!g.metrics) g.metrics = cJSON_CreateArray();
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "token", toks[i]);
        cJSON_AddItemToArray(g.logprobs, cJSON_Duplicate(o, 1));
        cJSON_AddItemToArray(g.metrics, o);
        if (srv_add_text(&g, toks[i], strlen(toks[i]), 0)) stopped_at = i;
    }
    cr_assert(stopped_at == 4 && g.stopped && !g.oom, "stopped at %d", stopped_at);
    srv_flush_text(&g, g.sent, 1);  // the end: the entries left
    const char *text[] = {" a", " and", " ", ""}, *lp[] = {" a|", " and|", " un|", ""};
    const char *mx[] = {" a|", " and|", " un|", "for|giving|"};
    cr_assert_eq(m.n, 4);
    for (int i = 0; i < 4; i++) {
        cr_expect_str_eq(m.text[i], text[i], "piece %d", i);
        cr_expect_str_eq(m.lp[i], lp[i], "piece %d", i);
        cr_expect_str_eq(m.mx[i], mx[i], "piece %d", i);
    }
    srv_gen_free(&g);
}

// The prefix a slot's cache gives a prompt: ids equal from the start, never the prompt's last
// token (its logits choose the first token), nothing from an empty cache.
Test(server, cache_match) {
    int held[] = {1, 2, 3, 4};
    SrvCache c = {.ids = held, .n = 4, .cap = 4};
    cr_assert_eq(srv_cache_match(&c, (int[]){1, 2, 3, 4, 5, 6}, 6), 4);  // a chat that goes on
    cr_assert_eq(srv_cache_match(&c, (int[]){1, 2, 3, 4}, 4), 3);        // the same prompt again
    cr_assert_eq(srv_cache_match(&c, (int[]){1, 2}, 2), 1);              // shorter
    cr_assert_eq(srv_cache_match(&c, (int[]){1, 2, 9, 4, 5}, 5), 2);     // differs at 2: rows 2.. stale
    cr_assert_eq(srv_cache_match(&c, (int[]){7, 2, 3}, 3), 0);
    cr_assert_eq(srv_cache_match(&c, (int[]){1}, 1), 0);
    c.n = 0;
    cr_assert_eq(srv_cache_match(&c, (int[]){1, 2, 3}, 3), 0);
}

Test(server, bad_flags_exit_2) {
    char model[512];
    snprintf(model, sizeof model, "%s/models/stories260K.f32.bin", build_dir());
    char prog[512];
    snprintf(prog, sizeof prog, "%s/cpu/tools/server", build_dir());
    const char *cases[][4] = {{"--port", "70000", NULL}, {"--parallel", "0", NULL}, {"--queue", "x", NULL},
                              {"-p", "hi", NULL}, {"--metrics", "/tmp/x", NULL}, {"--port", NULL},
                              {"--sampler", "branch", NULL}, {"--branch-k", "3", NULL},
                              {"--json-schema", "{}", NULL}, {"--logit-bias", "999999+1", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[6] = {model, cases[i][0], cases[i][1], NULL};
        RunResult r = run_prog(prog, args);
        cr_assert_eq(r.code, 2, "%s: exit %d", cases[i][0], r.code);
        cr_assert(strncmp(r.err, "server: ", 8) == 0 && count_lines(r.err) == 1, "%s", r.err);
        run_free(&r);
    }
}

// Every flag is checked before the server listens, with ./run's messages: a profile file that is
// not one, an unknown --profile-set key, a metric layer the model lacks (the file's text goes to
// the operator's stderr at startup, never to a client).
Test(server, bad_profile_flags_refused_at_startup, .timeout = 120) {
    char model[512], prog[512];
    snprintf(model, sizeof model, "%s/models/stories260K.f32.bin", build_dir());
    snprintf(prog, sizeof prog, "%s/cpu/tools/server", build_dir());
    const char *cases[][3] = {{"--profile", "/etc/passwd", "/etc/passwd:1: expected 'key = value'"},
                              {"--profile", "/nonexistent.profile", "no profile '/nonexistent.profile'"},
                              {"--profile-set", "foo=1", "--profile-set foo=1: unknown key 'foo'"},
                              {"--metric-layers", "99", "attn_layer = 99, but the model has 5 layers"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[] = {model, "--port", "0", "-t", "1", cases[i][0], cases[i][1], NULL};
        RunResult r = run_prog(prog, args);
        cr_expect_eq(r.code, 2, "%s %s: exit %d: %s", cases[i][0], cases[i][1], r.code, r.err);
        cr_expect(!strncmp(r.err, "server: ", 8) && count_lines(r.err) == 1 && strstr(r.err, cases[i][2]), "%s", r.err);
        cr_expect(!strstr(r.err, "listening"), "it listened: %s", r.err);
        run_free(&r);
    }
}

// Runs tests/server/<script> in the venv `make test` builds ($EMX_BUILD/server-venv) with the
// server, [./run,] and the test models' folder as arguments; it prints 'N passed, N failed' and
// exits 1 on any failure. A missing venv is a failure, never a skip.
static void server_script(const char *script, int pass_run, const char *what) {
    char py[512], prog[512], models[512], path[512], run_bin[512];
    snprintf(py, sizeof py, "%s/server-venv/bin/python", build_dir());
    snprintf(prog, sizeof prog, "%s/cpu/tools/server", build_dir());
    snprintf(models, sizeof models, "%s/models", build_dir());
    snprintf(path, sizeof path, "tests/server/%s", script);
    snprintf(run_bin, sizeof run_bin, "%s", run_binary());
    cr_assert_eq(access(py, X_OK), 0, "%s missing: make %s/server-venv/.ok installs the openai client", py, build_dir());
    const char *with_run[] = {path, prog, run_bin, models, NULL}, *without[] = {path, prog, models, NULL};
    RunResult r = run_prog(py, pass_run ? with_run : without);
    cr_assert_eq(r.code, 0, "%s failed:\n%s\n%s", what, r.out, r.err);
    cr_assert(strstr(r.out, " passed, 0 failed"), "%s", r.out);
    run_free(&r);
}

// The whole server as users call it, through the official openai client.
Test(server, openai_client, .timeout = 900) { server_script("test_openai_client.py", 1, "openai client checks"); }

// The request's sampling as OpenAI clients mean it (tests/server/test_sampling.py): the default
// sampler with the request's temperature, top_k, min_p and penalties equals ./run's text with
// those flags; the MODEL:entropix alias; GET /v1/models/{id}; /v1/embeddings' 404.
Test(server, sampling, .timeout = 600) { server_script("test_sampling.py", 1, "sampling checks"); }

// Structured output (tests/server/test_structured.py): response_format json_schema through the
// client's parse() and streamed, json_object, the grammar field, on SmolLM2 (skipped without
// `make weights`), every answer validated by PyPI jsonschema; the errors.
Test(server, structured_output, .timeout = 600) {
    char smol[512];
    snprintf(smol, sizeof smol, "%s/models/smollm2.q8.bin", build_dir());
    if (access(smol, R_OK) != 0) cr_skip_test("%s missing: needs `make weights`, then make %s", smol, smol);
    server_script("test_structured.py", 0, "structured output checks");
}

// One LangChain call (tests/server/test_langchain.py): ChatOpenAI's invoke and
// with_structured_output(json_schema) against the server, on SmolLM2 (skipped without it).
Test(server, langchain, .timeout = 300) {
    char smol[512];
    snprintf(smol, sizeof smol, "%s/models/smollm2.q8.bin", build_dir());
    if (access(smol, R_OK) != 0) cr_skip_test("%s missing: needs `make weights`, then make %s", smol, smol);
    server_script("test_langchain.py", 0, "LangChain checks");
}

// Tool calling (tests/server/test_tools.py) on qwen3-tiny: the openai client's loop with a forced
// call (its grammar makes random weights write one that parses), plain and streamed, "required",
// each call's arguments validated by jsonschema; the request errors; llama3's template refusing.
Test(server, tools, .timeout = 600) { server_script("test_tools.py", 0, "tool calling checks"); }

// tools, tool_choice and the messages' calls, parsed; each bad shape a 400 naming its field.
Test(server, parse_tool_fields) {
    SrvRequest r;
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}],\"tools\":[{\"type\":\"function\",\"function\":"
             "{\"name\":\"f\",\"parameters\":{\"type\":\"object\"},\"strict\":true}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"parallel_tool_calls\":false}",
             SRV_CHAT, &r);
    cr_assert(r.n_tools == 2 && r.tool_choice == SRV_TOOLS_FUNCTION && r.tool_choice_index == 1 && !r.parallel_tool_calls);
    cr_assert(r.tools[0].strict && !strcmp(r.tools[0].parameters, "{\"type\":\"object\"}") && !r.tools[1].parameters);
    cr_assert_str_eq(r.tools[1].json, "{\"type\": \"function\", \"function\": {\"name\": \"g\"}}");
    cr_assert(r.messages[1].n_tool_calls == 1 && !strcmp(r.messages[1].content, "") &&
              !strcmp(r.messages[1].tool_calls[0].arguments, "{\"a\": 1}") && !strcmp(r.messages[2].tool_call_id, "c1"));
    srv_request_free(&r);
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"type\":\"function\",\"function\":"
             "{\"name\":\"f\"}}]}", SRV_CHAT, &r);
    cr_assert(r.tool_choice == SRV_TOOLS_AUTO && r.parallel_tool_calls);
    srv_request_free(&r);
    const int C = SRV_CHAT;
#define U "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
#define F(n) "{\"type\":\"function\",\"function\":{\"name\":\"" n "\"}}"
    parse_bad(U "\"tools\":{}}", C, "tools", "array of 1 to 64");
    parse_bad(U "\"tools\":[]}", C, "tools", "array of 1 to 64");
    parse_bad(U "\"tools\":[{\"type\":\"function\"}]}", C, "tools", "tools[0]");
    parse_bad(U "\"tools\":[" F("f") "," F("a b") "]}", C, "tools", "tools[1].function.name");
    parse_bad(U "\"tools\":[" F("f") "," F("f") "]}", C, "tools", "twice");
    parse_bad(U "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}", C, "tools", "parameters");
    parse_bad(U "\"tools\":[" F("f") "],\"tool_choice\":\"any\"}", C, "tool_choice", "'any'");
    parse_bad(U "\"tools\":[" F("f") "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", C,
              "tool_choice", "'g'");
    parse_bad(U "\"tool_choice\":\"required\"}", C, "tool_choice", "no tools");
    parse_bad(U "\"parallel_tool_calls\":1}", C, "parallel_tool_calls", "parallel_tool_calls");
    parse_bad(U "\"functions\":[]}", C, "functions", "legacy");
    parse_bad("{\"prompt\":\"p\",\"tools\":[" F("f") "]}", SRV_COMPLETION, "tools", "chat");
    parse_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"tool_calls\":[]}]}", C, "messages", "only assistant");
    parse_bad("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\"}]}]}", C, "messages",
              "tool_calls[0]");
    parse_bad("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"function\":"
              "{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}", C, "messages", "not a JSON object");
    parse_bad("{\"messages\":[{\"role\":\"assistant\",\"content\":null}]}", C, "messages", "content");
    parse_bad("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":5}]}", C, "messages", "tool_call_id");
#undef U
#undef F
}

// Calls read back from an answer: the blocks that parse, the rest as content.
Test(server, tool_calls_parse) {
    static const char text[] = "<think>x</think>\n\nSure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}"
                               "\n</tool_call>\n<tool_call>{broken}</tool_call><tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>\n";
    char *content = NULL;
    cJSON *calls = srv_tool_calls_parse(EMX_CHAT_QWEN3, text, strlen(text), "x", 1, &content);
    cr_assert_eq(cJSON_GetArraySize(calls), 2);
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(f, "name")), "f");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments")), "{\"a\":[1,2]}");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 1), "id")), "call_x_1");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 1), "index")), 1);
    cr_expect_str_eq(content, "<think>x</think>\n\nSure.\n\n<tool_call>{broken}</tool_call>");
    cJSON_Delete(calls);
    free(content);
    static const char only[] = "\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    calls = srv_tool_calls_parse(EMX_CHAT_QWEN3, only, strlen(only), "y", 0, &content);
    cr_expect_eq(cJSON_GetArraySize(calls), 1);
    cr_expect_null(content);
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "index"));
    cJSON_Delete(calls);
    cr_expect_null(srv_tool_calls_parse(EMX_CHAT_QWEN3, "no calls <tool_call>{}", 22, "z", 0, &content));
    cr_expect_null(content);
    // Llama 3: the whole answer is the call
    static const char llama[] = " <|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}\n";
    calls = srv_tool_calls_parse(EMX_CHAT_LLAMA3, llama, strlen(llama), "w", 0, &content);
    cr_assert_eq(cJSON_GetArraySize(calls), 1);
    f = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments")), "{\"x\":1}");
    cr_expect_null(content);
    cJSON_Delete(calls);
    cr_expect_null(srv_tool_calls_parse(EMX_CHAT_LLAMA3, "Sure: {\"name\": \"f\", \"parameters\": {}}", 36, "v", 0, &content));
}

// HTTP as other OpenAI-compatible servers answer it (tests/server/test_http.py): HEAD on the GET
// routes and Allow naming it, Retry-After on 503, a client gone mid-generation logged 499,
// /models/{id} without /v1, best_of's likeliest candidates, duplicate JSON keys refused.
Test(server, http_semantics, .timeout = 600) { server_script("test_http.py", 0, "HTTP semantics checks"); }

// Back-pressure, the full queue's 503 and a disconnect freeing its slot, through raw sockets
// (tests/server/test_backpressure.py: every wait polls /metrics under a cap that only fails).
Test(server, backpressure_queue_disconnect, .timeout = 600) {
    server_script("test_backpressure.py", 0, "back-pressure checks");
}

// Slow, many, departing and hostile clients, and the shutdown (tests/server/test_hardening.py):
// slow requests closed at their deadlines, the per-address and global limits with /health's
// reserve, a runaway pool's options and memory refused, a departed client's pool stopped,
// SIGTERM's final events and a second signal, foreign origins, key sources, JSON errors.
Test(server, hardening, .timeout = 600) { server_script("test_hardening.py", 0, "hardening checks"); }

// The branching decoder (tests/server/test_branch.py): ./run --sampler branch's text, streamed or
// not, chat and raw, with an alphabet's committed answer; bad values and logprobs refused; its
// tails' memory admitted; the prefix cache after it; a departed client stopping it.
Test(server, branch, .timeout = 600) { server_script("test_branch.py", 1, "branching decoder checks"); }

// Many clients at once (tests/server/test_load.py): 16 clients x 50 requests on 4 slots, every
// answer equal to the same request run alone, no error, the slots' steps batched, resident
// memory flat after warm-up.
Test(server, load_16_clients, .timeout = 900) { server_script("test_load.py", 0, "load test"); }

// The soak test's arithmetic and parsing (tools/soak/soak_lib.py: percentiles, the growth fit,
// /metrics and /proc parsing, the summary's leaks and errors) against values worked out by hand,
// by its own unittest file (standard library; well under a second). The soak itself is a command,
// not a test (docs/server.md "Soak test").
Test(server, soak_logic, .timeout = 60) {
    const char *args[] = {"python3", "-m", "unittest", "tools/soak/test_soak_lib.py", NULL};
    RunResult r = run_prog("/usr/bin/env", args);
    cr_expect_eq(r.code, 0, "soak_lib's tests failed:\n%s", r.err);
    cr_expect(strstr(r.err, "\nOK") != NULL, "%s", r.err);
    run_free(&r);
}
