// A single-node OpenSearch on 127.0.0.1, security plugin absent, run as a single source file:
//   java -cp <classpath of pom.xml> OpenSearchLauncher.java <home> <http-port>
// Prints "opensearch ready on <host>:<port>" once the cluster is yellow; stops on SIGTERM.
import org.codelibs.opensearch.runner.OpenSearchRunner;

public class OpenSearchLauncher {
    public static void main(String[] args) throws Exception {
        String home = args[0];
        int httpPort = Integer.parseInt(args[1]);
        OpenSearchRunner runner = new OpenSearchRunner();
        runner.onBuild((index, settings) -> {
            settings.put("network.host", "127.0.0.1");
            settings.put("http.port", String.valueOf(httpPort));
            settings.put("transport.port", String.valueOf(httpPort + 100));
            settings.put("discovery.type", "single-node");
            // Indexes are created by the lexical service with explicit mappings, never by a write.
            settings.put("action.auto_create_index", "false");
        }).build(OpenSearchRunner.newConfigs()
            .basePath(home).numOfNode(1).clusterName("engram").printOnFailure());
        runner.ensureYellow();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                runner.close();
            } catch (Exception e) {
                e.printStackTrace();
            }
        }));
        System.out.println("opensearch ready on 127.0.0.1:" + httpPort);
        Thread.currentThread().join();
    }
}
