// Neo4j 5.26 Community with Bolt on 127.0.0.1 and auth off, run as a single source file:
//   java -cp <classpath of pom.xml> Neo4jLauncher.java <home> <bolt-port> [pagecache, e.g. 256m]
// Prints "neo4j ready on <host>:<port>" once the default database is available; stops on SIGTERM.
import java.nio.file.Path;
import java.time.Duration;
import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.io.ByteUnit;

public class Neo4jLauncher {
    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]);
        int port = Integer.parseInt(args[1]);
        long pageCacheMb = args.length > 2 ? Long.parseLong(args[2]) : 256;
        DatabaseManagementService dbms = new DatabaseManagementServiceBuilder(home)
            .setConfig(BoltConnector.enabled, true)
            .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", port))
            .setConfig(GraphDatabaseSettings.auth_enabled, false)
            .setConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(pageCacheMb))
            .build();
        Runtime.getRuntime().addShutdownHook(new Thread(dbms::shutdown));
        boolean up = dbms.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME)
            .isAvailable(Duration.ofSeconds(120).toMillis());
        if (!up) {
            System.err.println("neo4j: the default database did not become available");
            System.exit(1);
        }
        System.out.println("neo4j ready on 127.0.0.1:" + port);
        Thread.currentThread().join();
    }
}
