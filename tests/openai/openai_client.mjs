// The official `openai` npm package against `hillinfer serve` (run by scripts/openai_client.sh, which
// installs the package and starts the server): completions and chat, streaming and not. Greedy output
// must equal `hillinfer generate` on the same prompt (the references come in the environment).
// Exit code 0: every check passed; 1: a check failed (printed).
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const env = process.env;
const client = new OpenAI({ baseURL: env.HILL_BASE_URL, apiKey: env.HILL_API_KEY, maxRetries: 0, timeout: 60000 });
let failures = 0;
function check(ok, what, detail) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${ok ? '' : ': ' + detail}`);
  if (!ok) failures++;
}

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === env.HILL_MODEL_ID, 'models.list', JSON.stringify(models.data));

const n = Number(env.HILL_N);
const completionRef = JSON.parse(readFileSync(env.HILL_COMPLETION_REF, 'utf8')).text;
const chatRef = JSON.parse(readFileSync(env.HILL_CHAT_REF, 'utf8')).text;
const c = await client.completions.create({ model: env.HILL_MODEL_ID, prompt: env.HILL_PROMPT, max_tokens: n, temperature: 0 });
check(c.choices[0].text === completionRef, 'completions.create = generate',
      JSON.stringify(c.choices[0].text) + ' vs ' + JSON.stringify(completionRef));
check(c.usage.completion_tokens === n && c.usage.prompt_tokens > 0, 'completions usage', JSON.stringify(c.usage));

let streamed = '';
const cs = await client.completions.create({ model: env.HILL_MODEL_ID, prompt: env.HILL_PROMPT, max_tokens: n, temperature: 0,
                                             stream: true });
for await (const chunk of cs) streamed += chunk.choices[0]?.text ?? '';
check(streamed === completionRef, 'completions stream = generate', JSON.stringify(streamed));

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: env.HILL_PROMPT }];
const ch = await client.chat.completions.create({ model: env.HILL_MODEL_ID, messages, max_tokens: n, temperature: 0 });
const reply = ch.choices[0].message.content;
const ref = chatRef;
check(ch.choices[0].finish_reason === 'length' ? reply === ref : ref.startsWith(reply), 'chat.completions.create = generate '
      + '--special on the template text', JSON.stringify(reply) + ' vs ' + JSON.stringify(ref));
check(ch.choices[0].message.role === 'assistant', 'chat role', ch.choices[0].message.role);

let chatStreamed = '';
let finish = null;
const chs = await client.chat.completions.create({ model: env.HILL_MODEL_ID, messages, max_tokens: n, temperature: 0,
                                                   stream: true });
for await (const chunk of chs) {
  if (chunk.choices.length === 0) continue;
  chatStreamed += chunk.choices[0].delta?.content ?? '';
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
check(chatStreamed === reply, 'chat stream = chat', JSON.stringify(chatStreamed));
check(finish === ch.choices[0].finish_reason, 'chat stream finish_reason', finish);

// An error comes back as the package's APIError with the status and the field.
try {
  await client.completions.create({ model: env.HILL_MODEL_ID, prompt: 'x', n: 2 });
  check(false, 'n = 2 refused', 'no error');
} catch (e) {
  check(e.status === 400 && e.param === 'n', 'n = 2 refused with 400 naming n', `${e.status} ${e.param} ${e.message}`);
}
process.exit(failures === 0 ? 0 : 1);
