// The RocketMQ 5.x Node.js client (npm rocketmq-client-nodejs) against the broker's gRPC
// endpoint, for tests/grpc/test_node5_client.py. Prints one "RESULT {json}" line.
//
//   node node5_client.js produce ENDPOINT TOPIC COUNT
//   node node5_client.js consume ENDPOINT TOPIC GROUP COUNT
'use strict';

const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function produce(endpoints, topic, count) {
  const producer = new Producer({ endpoints, namespace: '' });
  await producer.startup();
  const ids = [];
  try {
    for (let i = 0; i < count; i++) {
      const receipt = await producer.send({
        topic,
        tag: 'NodeTag',
        keys: [`nk${i}`, 'shared'],
        properties: new Map([['i', String(i)]]),
        body: Buffer.from(`node-${i}`),
      });
      ids.push(receipt.messageId);
    }
  } finally {
    await producer.shutdown();
  }
  return { sent: ids };
}

async function consume(endpoints, topic, group, count) {
  const consumer = new SimpleConsumer({
    endpoints,
    namespace: '',
    consumerGroup: group,
    subscriptions: new Map([[topic, '*']]),
    awaitDuration: 5000,
  });
  await consumer.startup();
  const got = [];
  const deadline = Date.now() + 40000;
  try {
    while (got.length < count && Date.now() < deadline) {
      const messages = await consumer.receive(16, 30000);
      for (const message of messages) {
        got.push({
          body: message.body.toString(),
          id: message.messageId,
          tag: message.tag,
          keys: [...message.keys].sort(),
          properties: Object.fromEntries(message.properties),
          attempt: message.deliveryAttempt,
        });
        await consumer.ack(message);
      }
    }
  } finally {
    await consumer.shutdown();
  }
  return { messages: got };
}

async function main() {
  const [mode, endpoints, topic, ...rest] = process.argv.slice(2);
  const result = mode === 'produce'
    ? await produce(endpoints, topic, Number(rest[0]))
    : await consume(endpoints, topic, rest[0], Number(rest[1]));
  console.log('RESULT ' + JSON.stringify(result));
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
